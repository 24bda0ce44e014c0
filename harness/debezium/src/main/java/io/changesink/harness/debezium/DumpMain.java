package io.changesink.harness.debezium;

import com.amazon.ion.IonReader;
import com.amazon.ion.IonWriter;
import com.amazon.ion.system.IonReaderBuilder;
import com.amazon.ion.system.IonTextWriterBuilder;

import java.io.InputStream;
import java.nio.file.Files;
import java.nio.file.Path;

/** Prints Ion files (binary or text) as text Ion, one value per line: for reading batches. */
public final class DumpMain {
    private DumpMain() {
    }

    public static void main(String[] args) throws Exception {
        for (String f : args) {
            try (InputStream in = Files.newInputStream(Path.of(f));
                 IonReader reader = IonReaderBuilder.standard().build(in);
                 IonWriter writer = IonTextWriterBuilder.standard().withWriteTopLevelValuesOnNewLines(true).build((Appendable) System.out)) {
                writer.writeValues(reader);
            }
            System.out.println();
        }
    }
}
