package io.changesink.harness.debezium.kestra;

import com.fasterxml.jackson.annotation.JsonCreator;
import com.fasterxml.jackson.annotation.JsonGetter;
import com.fasterxml.jackson.annotation.JsonIgnore;
import com.fasterxml.jackson.annotation.JsonProperty;
import com.fasterxml.jackson.annotation.JsonSetter;
import com.fasterxml.jackson.databind.annotation.JsonDeserialize;
import lombok.Getter;
import lombok.Setter;

import java.time.Instant;
import java.util.Map;

/**
 * What Jackson sees of the trigger's {@code io.kestra.plugin.debezium.models.Envelope}: {@code op} read into an
 * {@link Operation}, {@code ts_ms} into an Instant, {@code before}/{@code after} through {@link PlainMapDeserializer},
 * {@code transaction} as a map; {@code ts_us}, {@code ts_ns} (and anything else) into the any-setter map. Like the
 * real class (a Lombok all-args constructor), it is built through a creator, so Jackson buffers the other fields.
 * Its getters, and the setters of the row images and the transaction, are Lombok's, as the real class's are
 * ({@code @Data}); the fields' {@code @JsonIgnore} keeps {@code operation} and {@code timestamp} out of Jackson's
 * view, getters included, as there.
 */
@Getter
public class Envelope extends Message {
    @JsonIgnore
    private Operation operation;
    @JsonIgnore
    private Instant timestamp;
    @JsonDeserialize(using = PlainMapDeserializer.class)
    @Setter
    private Map<String, Object> before;
    @JsonDeserialize(using = PlainMapDeserializer.class)
    @Setter
    private Map<String, Object> after;
    @Setter
    private Map<String, Object> transaction;

    @JsonCreator
    public Envelope(@JsonProperty("before") @JsonDeserialize(using = PlainMapDeserializer.class) Map<String, Object> before,
                    @JsonProperty("after") @JsonDeserialize(using = PlainMapDeserializer.class) Map<String, Object> after,
                    @JsonProperty("transaction") Map<String, Object> transaction) {
        this.before = before;
        this.after = after;
        this.transaction = transaction;
    }

    @JsonGetter("op")
    public String getOp() {
        return operation != null ? operation.code() : null;
    }

    @JsonSetter("op")
    public void setOp(String value) {
        this.operation = Operation.forCode(value);
    }

    @JsonGetter("ts_ms")
    public Long getTs() {
        return timestamp != null ? timestamp.toEpochMilli() : null;
    }

    @JsonSetter("ts_ms")
    public void setTsMs(Long value) {
        this.timestamp = Instant.ofEpochMilli(value);
    }
}
