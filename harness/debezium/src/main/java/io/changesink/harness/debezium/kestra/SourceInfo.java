package io.changesink.harness.debezium.kestra;

import com.fasterxml.jackson.annotation.JsonCreator;
import com.fasterxml.jackson.annotation.JsonProperty;
import com.fasterxml.jackson.annotation.JsonPropertyOrder;
import com.fasterxml.jackson.annotation.JsonSetter;
import lombok.Getter;
import lombok.Setter;

import java.time.Instant;

/**
 * What Jackson sees of the trigger's {@code Message.Source}: eight declared properties, then the inherited
 * {@code source}, then the any-getter map. The real class has a Lombok all-args constructor that Jackson uses as its
 * creator (plugin-debezium's lombok.config adds {@code @ConstructorProperties}); the same creator is declared here,
 * because it matters twice: Jackson writes creator properties first (the order below), and while it waits for
 * creator properties that never come ({@code timestamp}, {@code row}) it buffers every other field and applies them
 * afterwards in reverse order, so the any-setter HashMap receives lsn before ts_us. Those two share a HashMap
 * bucket, so the insertion order shows: the real batches have {@code ..., sequence, lsn, ts_us, ...}.
 * {@code ts_ms} lands in {@code timestamp} (an Instant), {@code collection} in {@code table}; {@code row} is never
 * set by the PostgreSQL connector and is written as null, as is {@code source}. The getters and setters are
 * Lombok's, as the real class's are ({@code @Data}).
 */
@Getter
@Setter
@JsonPropertyOrder({"version", "connector", "name", "timestamp", "snapshot", "db", "table", "row"})
public class SourceInfo extends Message {
    private String version;
    private String connector;
    private String name;
    private Instant timestamp;
    private String snapshot;
    private String db;
    private String table;
    private Integer row;

    @JsonCreator
    public SourceInfo(@JsonProperty("version") String version, @JsonProperty("connector") String connector,
                      @JsonProperty("name") String name, @JsonProperty("timestamp") Instant timestamp,
                      @JsonProperty("snapshot") String snapshot, @JsonProperty("db") String db,
                      @JsonProperty("table") String table, @JsonProperty("row") Integer row) {
        this.version = version;
        this.connector = connector;
        this.name = name;
        this.timestamp = timestamp;
        this.snapshot = snapshot;
        this.db = db;
        this.table = table;
        this.row = row;
    }

    @JsonSetter("ts_ms")
    public void setTsMs(Long value) {
        this.timestamp = Instant.ofEpochMilli(value);
    }

    @JsonSetter("collection")
    public void setCollection(String value) {
        this.table = value;
    }
}
