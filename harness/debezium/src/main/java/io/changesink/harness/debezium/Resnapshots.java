package io.changesink.harness.debezium;

import java.util.List;

/**
 * Re-snapshots under the seed flow's trigger settings (snapshot.mode initial, Debezium's default
 * skipped.operations=t, so a TRUNCATE never reaches a batch). An operator who learns that a TRUNCATE was dropped
 * deletes the trigger's offsets (its KV entry; or renames its stateName): the next evaluation finds the slot and no
 * offsets and snapshots again, then streams on from the new snapshot. Issue 28 (case 3 and its siblings).
 */
final class Resnapshots {
    private Resnapshots() {
    }

    private static final List<Col> COLUMNS = List.of(Col.of("id", "integer PRIMARY KEY", "Int32"),
        Col.of("v", "text NOT NULL", "String"));

    /**
     * The TRUNCATE and the keys created again after it are captured before the re-snapshot: the batch holds CREATEs
     * of keys a read model holds live (the TRUNCATE that removed them is missing), in one transaction that ends the
     * batch. Then the offsets are deleted, the trigger snapshots again (keys 3, 4 and 5 are gone from it), and the
     * stream goes on: an UPDATE of a created-again key, an INSERT, a DELETE.
     */
    static Scenario afterCreates() {
        return resnapshot("resnapshot_after_creates",
            "snapshot; TRUNCATE (dropped: the seed's settings) and keys 1, 2 created again in one transaction, captured;"
                + " the trigger's offsets deleted (the operator's re-snapshot); then streamed changes",
            run -> {
                run.sql("TRUNCATE public.resnap;");
                run.sql("""
                    BEGIN;
                    INSERT INTO public.resnap VALUES (1, 'one again'), (2, 'two again'), (6, 'six');
                    COMMIT;""");
                run.poll("stream-2: the TRUNCATE dropped, keys 1 and 2 created again");
            });
    }

    /**
     * The TRUNCATE and what follows it are never captured: the offsets are deleted before the next evaluation, which
     * snapshots again (its snapshot lies after them; the slot skips what committed before it). Keys 3, 4 and 5 are
     * gone from the source and from the re-snapshot; keys 1 and 2 come back as READ rows with new values, key 6 is
     * new. Then the stream: an UPDATE, an INSERT, a DELETE.
     */
    static Scenario afterTruncate() {
        return resnapshot("resnapshot_after_truncate",
            "snapshot; TRUNCATE (dropped: the seed's settings) and inserts, not captured; the trigger's offsets deleted"
                + " (the operator's re-snapshot); then streamed changes",
            run -> {
                run.sql("TRUNCATE public.resnap;");
                run.sql("INSERT INTO public.resnap VALUES (1, 'one again'), (2, 'two again'), (6, 'six');");
            });
    }

    /**
     * The scenarios' common course: keys 1..5 snapshotted, key 2 updated and streamed; then truncate (the TRUNCATE
     * and its inserts, captured or not); the offsets deleted and the table snapshotted again; then a transaction
     * streamed that updates key 1, inserts key 7 and deletes key 6.
     */
    private static Scenario resnapshot(String name, String description, Scenario.Steps truncate) {
        return new Scenario(name, description, "resnap", COLUMNS, List.of("id"),
            "INSERT INTO public.resnap VALUES (1, 'one'), (2, 'two'), (3, 'three'), (4, 'four'), (5, 'five');",
            run -> {
                run.poll("snapshot");
                run.sql("UPDATE public.resnap SET v = 'two, updated' WHERE id = 2;");
                run.poll("stream-1");
                truncate.run(run);
                run.forgetOffsets("the operator deletes the trigger's offsets (its KV entry) to snapshot again");
                run.poll("re-snapshot");
                run.sql("""
                    BEGIN;
                    UPDATE public.resnap SET v = 'one, streamed' WHERE id = 1;
                    INSERT INTO public.resnap VALUES (7, 'seven');
                    DELETE FROM public.resnap WHERE id = 6;
                    COMMIT;""");
                run.poll("stream-3");
                run.drain("drained");
            });
    }
}
