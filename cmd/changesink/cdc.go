package main

import "errors"

// cdcCmd groups the cdc commands (owned by tasks/cdc).
type cdcCmd struct {
	Setup cdcSetupCmd `cmd:"" help:"Create the ClickHouse ReplacingMergeTree target table and its live view from the mapping. Idempotent."`
	Apply cdcApplyCmd `cmd:"" help:"Apply one Debezium Ion batch to ClickHouse, then read it back and verify."`
}

type cdcSetupCmd struct{}
type cdcApplyCmd struct{}

func (cdcSetupCmd) Run(*app) error { return errors.New("not implemented yet") }
func (cdcApplyCmd) Run(*app) error { return errors.New("not implemented yet") }
