package io.changesink.harness.debezium.kestra;

import com.fasterxml.jackson.annotation.JsonAnyGetter;
import com.fasterxml.jackson.annotation.JsonAnySetter;

import java.util.HashMap;
import java.util.Map;

/**
 * What Jackson sees of the trigger's {@code io.kestra.plugin.debezium.models.Message}: a {@code source} property
 * and every other field collected into a {@link HashMap} (any-setter) that is written back, in the HashMap's own
 * order, after the declared properties (any-getter). That HashMap order is why {@code metadata.source} ends with
 * schema, sequence, lsn, ts_us, txId, ts_ns in the real batches.
 */
public class Message {
    private SourceInfo source;
    private Map<String, Object> properties;

    public SourceInfo getSource() {
        return source;
    }

    public void setSource(SourceInfo source) {
        this.source = source;
    }

    @JsonAnyGetter
    public Map<String, Object> getProperties() {
        return properties != null ? properties : new HashMap<>();
    }

    @JsonAnySetter
    public void addProperties(String property, Object value) {
        if (properties == null) {
            properties = new HashMap<>();
        }
        properties.put(property, value);
    }
}
