package io.changesink.harness.debezium;

import org.apache.kafka.connect.data.ConnectSchema;
import org.apache.kafka.connect.data.Decimal;
import org.apache.kafka.connect.data.Field;
import org.apache.kafka.connect.data.Schema;
import org.apache.kafka.connect.data.Struct;

import java.math.BigDecimal;
import java.nio.ByteBuffer;
import java.time.Duration;
import java.time.Instant;
import java.time.LocalDate;
import java.time.LocalTime;
import java.time.OffsetTime;
import java.time.Period;
import java.time.ZonedDateTime;
import java.util.ArrayList;
import java.util.Collection;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * The Kestra-independent half of the trigger: a Kafka Connect value from Debezium (schema + Struct) to plain Java
 * values, as plugin-debezium's MapConverter does it before handing the envelope to Kestra's JSON mapper.
 * Debezium logical types become java.time values (Date → LocalDate, MicroTimestamp → Instant, ZonedTimestamp →
 * ZonedDateTime, ...), Connect Decimal stays BigDecimal, BYTES become byte[], structs become LinkedHashMaps in
 * field order (so an unconstrained numeric, Debezium's VariableScaleDecimal struct, becomes {scale, value}).
 * A null takes the field schema's default value when it has one, as Connect's {@code Struct.get} does too.
 * Quirks kept on purpose because the trigger has them: MicroDuration is read as milliseconds × 1000, and
 * io.debezium.time.Time (an INT32 in Debezium) is refused unless it arrives as a Long.
 */
final class ConnectValues {
    private ConnectValues() {
    }

    /** True when the schema is a Debezium change envelope (the trigger filters out everything else). */
    static boolean isEnvelope(Schema schema) {
        return schema != null && schema.name() != null && io.debezium.data.Envelope.isEnvelopeSchema(schema);
    }

    static Object convert(Schema schema, Object value) {
        if (value == null) {
            if (schema == null) {
                return null;
            }
            if (schema.defaultValue() != null) {
                return convert(schema, schema.defaultValue());
            }
            if (schema.isOptional()) {
                return null;
            }
            throw new IllegalArgumentException("null value for a required field without a default");
        }
        if (schema != null && schema.name() != null) {
            Object logical = logical(schema.name(), value);
            if (logical != null) {
                return logical;
            }
        }
        Schema.Type type = schema != null ? schema.type() : ConnectSchema.schemaType(value.getClass());
        if (type == null) {
            throw new IllegalArgumentException("no Connect type for " + value.getClass());
        }
        switch (type) {
            case INT8, INT16, INT32, INT64, FLOAT32, FLOAT64, BOOLEAN:
                return value;
            case STRING:
                return (CharSequence) value;
            case BYTES:
                if (value instanceof byte[] b) {
                    return b;
                }
                if (value instanceof ByteBuffer bb) {
                    return bb.array();
                }
                throw new IllegalArgumentException("bytes field holds " + value.getClass());
            case ARRAY: {
                List<Object> list = new ArrayList<>();
                for (Object elem : (Collection<?>) value) {
                    list.add(convert(schema == null ? null : schema.valueSchema(), elem));
                }
                return list;
            }
            case MAP: {
                Map<?, ?> map = (Map<?, ?>) value;
                boolean stringKeys = schema == null
                    ? map.keySet().stream().allMatch(k -> k instanceof String)
                    : schema.keySchema().type() == Schema.Type.STRING;
                Map<String, Object> obj = new LinkedHashMap<>();
                List<Object> pairs = new ArrayList<>();
                for (Map.Entry<?, ?> e : map.entrySet()) {
                    Object k = convert(schema == null ? null : schema.keySchema(), e.getKey());
                    Object v = convert(schema == null ? null : schema.valueSchema(), e.getValue());
                    if (stringKeys) {
                        obj.put((String) k, v);
                    } else {
                        pairs.add(List.of(k, v));
                    }
                }
                return stringKeys ? obj : pairs;
            }
            case STRUCT: {
                Struct struct = (Struct) value;
                if (!struct.schema().equals(schema)) {
                    throw new IllegalArgumentException("struct does not match its schema");
                }
                Map<String, Object> obj = new LinkedHashMap<>();
                for (Field f : schema.fields()) {
                    obj.put(f.name(), convert(f.schema(), struct.get(f)));
                }
                return obj;
            }
            default:
                throw new IllegalArgumentException("cannot convert " + type);
        }
    }

    /** Debezium's logical types, by schema name; null when the name is not one of them. */
    private static Object logical(String name, Object v) {
        return switch (name) {
            case io.debezium.time.Date.SCHEMA_NAME -> LocalDate.ofEpochDay(as(Integer.class, v, name));
            case io.debezium.time.Interval.SCHEMA_NAME -> Period.parse(as(String.class, v, name));
            case io.debezium.time.MicroDuration.SCHEMA_NAME -> Duration.ofMillis(as(Long.class, v, name) * 1000);
            case io.debezium.time.MicroTime.SCHEMA_NAME -> LocalTime.ofNanoOfDay(as(Long.class, v, name) * 1000);
            case io.debezium.time.MicroTimestamp.SCHEMA_NAME -> Instant.ofEpochSecond(0L, as(Long.class, v, name) * 1000);
            case io.debezium.time.NanoDuration.SCHEMA_NAME -> Duration.ofNanos(as(Long.class, v, name));
            case io.debezium.time.NanoTime.SCHEMA_NAME -> LocalTime.ofNanoOfDay(as(Long.class, v, name));
            case io.debezium.time.NanoTimestamp.SCHEMA_NAME -> Instant.ofEpochSecond(0L, as(Long.class, v, name));
            case io.debezium.time.Time.SCHEMA_NAME -> LocalTime.ofNanoOfDay(as(Long.class, v, name) * 1000 * 1000);
            case io.debezium.time.Timestamp.SCHEMA_NAME -> Instant.ofEpochMilli(as(Long.class, v, name));
            case io.debezium.time.Year.SCHEMA_NAME -> LocalDate.of(as(Integer.class, v, name), 1, 1);
            case io.debezium.time.ZonedTime.SCHEMA_NAME -> OffsetTime.parse(as(String.class, v, name));
            case io.debezium.time.ZonedTimestamp.SCHEMA_NAME -> ZonedDateTime.parse(as(String.class, v, name));
            case Decimal.LOGICAL_NAME -> as(BigDecimal.class, v, name);
            default -> null;
        };
    }

    private static <T> T as(Class<T> cls, Object v, String name) {
        if (!cls.isInstance(v)) {
            throw new IllegalArgumentException("invalid type for " + name + ": expected " + cls.getSimpleName()
                + " but was " + v.getClass() + " for '" + v + "'");
        }
        return cls.cast(v);
    }
}
