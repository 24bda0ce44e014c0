// Package slotsync is cdc sync and its setup: Sync streams a PostgreSQL
// replication slot into the ClickHouse targets of the published tables,
// and SetupSync makes the publication and the slot, sets the targets up
// and loads the tables from the slot's exported snapshot. The facade,
// tasks/cdc, calls them; how they work, and what an operator sees:
// docs/cdc-sync.md (the stream) and docs/initial-load.md (the load).
//
// A run's files, by concern:
//
//	config.go     the settings (Config), their env names and defaults
//	sync.go       Sync, and the run's state (syncRun)
//	setup.go      SetupSync: the publication, the slot, the targets
//	check.go      Check (cdc check), and setup's first step: every
//	              problem setup would meet, at once, creating nothing
//	source.go     the source's connections and the slot's stream
//	catalog.go    the published tables' columns, the source's identity
//	targets.go    each table's mapping and target, the locks
//	positions.go  every rule about a WAL position: the slot against the
//	              sync ledger, caught up, the load points, the commit
//	              floors, the keys a load did not find
//	stream.go     whole committed transactions into each table's batch
//	rows.go       a tuple's values into a row, through the mapping
//	shape.go      what a target follows of its source table (attribute
//	              numbers, the storage and columns' fingerprint), and
//	              whether a rewrite changed values the stream cannot show
//	schema.go     a table's new definition: followed in place (planFollow,
//	              follow), or a resync, or a hold
//	resync.go     a table loaded again beside its target and swapped in;
//	              a table held (quarantine); the operator's resyncs
//	flush.go      a flush applied (applier), recorded, confirmed
//	load.go       setup's load: which load, continued or not, the load
//	              ledger (loader)
//	copy.go       tables copied into their targets (initload), newer rows
//	              refused, gone ones deleted
//	joined.go     the tables that wait for a load of their own (joined,
//	              dropped and created again, a target that lost its rows)
//	result.go     what a run reports
//
// It imports the rooms below it, applier (a table's batch into its target)
// and initload (a snapshot's tables copied in chunks), and the layers
// below those; neither imports it.
package slotsync
