package io.changesink.harness.debezium.kestra;

import io.kestra.core.serializers.FileSerde;
import io.kestra.core.serializers.JacksonMapper;

import java.io.IOException;
import java.io.OutputStream;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.Map;

/**
 * The Kestra-version-dependent half of the trigger: from a Debezium envelope already converted to Java values
 * ({@code ConnectValues}) to the record {@code FileSerde.write} puts in the batch, with the seed flow's settings
 * (format INLINE, deleted ADD_FIELD as "deleted", key ADD_FIELD, metadata ADD_FIELD as "metadata").
 *
 * <p>Only Jackson, {@code JacksonMapper} and {@code FileSerde} are touched, so the same class runs on Kestra 2.0
 * (binary Ion) and on Kestra 1.x (text Ion, one value per line). Steps, as in plugin-debezium's MapConverter and
 * ChangeConsumer:
 * <ol>
 *   <li>{@code JacksonMapper.ofJson().convertValue(envelope, Envelope.class)}: Kestra's JSON mapper writes the
 *       envelope into a token buffer (NON_NULL: null columns and null source fields vanish; dates and times become
 *       strings in that Kestra version's format) and reads it back into the model;</li>
 *   <li>the row image: {@code before} for a delete, {@code after} otherwise, in column order;</li>
 *   <li>{@code deleted}: true for DELETE and TRUNCATE;</li>
 *   <li>key ADD_FIELD adds nothing: the trigger converts a record key only when it has no key schema, and every
 *       key the PostgreSQL connector sends has one;</li>
 *   <li>{@code metadata}: a HashMap of the envelope's other fields (ts_us, ts_ns), operation, transaction (when
 *       present), source and timestamp (the envelope's ts_ms, processing time).</li>
 * </ol>
 */
public final class InlineRecords {
    private InlineRecords() {
    }

    public static Map<String, Object> inline(Map<String, Object> envelopeValue) {
        Envelope envelope = JacksonMapper.ofJson().convertValue(envelopeValue, Envelope.class);
        Operation op = envelope.getOperation();

        Map<String, Object> record = new LinkedHashMap<>();
        Map<String, Object> image = op == Operation.DELETE ? envelope.getBefore() : envelope.getAfter();
        if (image != null) {
            record.putAll(image);
        }
        record.put("deleted", op == Operation.DELETE || op == Operation.TRUNCATE);

        Map<Object, Object> metadata = new HashMap<>();
        metadata.putAll(envelope.getProperties());
        if (op != null) {
            metadata.put("operation", op);
        }
        if (envelope.getTransaction() != null) {
            metadata.put("transaction", envelope.getTransaction());
        }
        if (envelope.getSource() != null) {
            metadata.put("source", envelope.getSource());
        }
        if (envelope.getTimestamp() != null) {
            metadata.put("timestamp", envelope.getTimestamp());
        }
        record.put("metadata", metadata);
        return record;
    }

    /** Appends one record to a batch, as the trigger does for every change (one FileSerde.write each). */
    public static void write(OutputStream out, Map<String, Object> envelopeValue) throws IOException {
        FileSerde.write(out, inline(envelopeValue));
    }
}
