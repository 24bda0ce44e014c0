package io.changesink.harness.debezium;

import io.changesink.harness.debezium.kestra.InlineRecords;

import java.io.BufferedOutputStream;
import java.io.InputStream;
import java.io.ObjectInputStream;
import java.io.OutputStream;
import java.nio.file.DirectoryStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.util.List;
import java.util.Map;
import java.util.TimeZone;

/**
 * Writes the Kestra 1.x text form of every captured batch: for OUT/<scenario>/java/changes-NN.ser (the envelopes
 * the capture converted to Java values), OUT/<scenario>/changes-NN.text.ion through this classpath's FileSerde.
 * It must run on the io.kestra:core 1.x classpath (kestra1/pom.xml); it touches no Debezium class.
 *
 * <pre>TextMain OUT</pre>
 */
public final class TextMain {
    private TextMain() {
    }

    public static void main(String[] args) throws Exception {
        if (args.length != 1) {
            System.err.println("usage: TextMain OUT");
            System.exit(2);
        }
        if (!"UTC".equals(TimeZone.getDefault().getID())) {
            System.err.println("run with -Duser.timezone=UTC");
            System.exit(2);
        }
        String kestra = io.kestra.core.serializers.FileSerde.class.getProtectionDomain().getCodeSource().getLocation().getPath();
        int files = 0;
        try (DirectoryStream<Path> scenarios = Files.newDirectoryStream(Path.of(args[0]), Files::isDirectory)) {
            for (Path dir : scenarios) {
                Path java = dir.resolve("java");
                if (!Files.isDirectory(java) || dir.getFileName().toString().endsWith(".tmp")) {
                    continue;
                }
                try (DirectoryStream<Path> sers = Files.newDirectoryStream(java, "changes-*.ser")) {
                    for (Path ser : sers) {
                        String base = ser.getFileName().toString().replace(".ser", "");
                        List<Map<String, Object>> envelopes = read(ser);
                        Path tmp = dir.resolve(base + ".text.ion.tmp");
                        try (OutputStream out = new BufferedOutputStream(Files.newOutputStream(tmp))) {
                            for (Map<String, Object> e : envelopes) {
                                InlineRecords.write(out, e);
                            }
                        }
                        Files.move(tmp, dir.resolve(base + ".text.ion"), StandardCopyOption.REPLACE_EXISTING);
                        files++;
                    }
                }
            }
        }
        System.out.println("debezium: wrote " + files + " text batches with FileSerde from " + kestra);
    }

    @SuppressWarnings("unchecked")
    private static List<Map<String, Object>> read(Path ser) throws Exception {
        try (InputStream in = Files.newInputStream(ser); ObjectInputStream ois = new ObjectInputStream(in)) {
            return (List<Map<String, Object>>) ois.readObject();
        }
    }
}
