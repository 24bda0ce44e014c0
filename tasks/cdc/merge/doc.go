// Package merge is cdc's pure logic: the latest row per key of a batch in
// commit order (Batch), refusing conflicts and following primary-key
// changes; unchanged TOAST values filled from the batch, or from the
// target's rows handed in as values; the rows a target lacks or holds
// older (Selection), and the refusal of a batch whose versions went
// backwards. It never reads a file or talks to ClickHouse: the caller
// passes what the target holds.
package merge
