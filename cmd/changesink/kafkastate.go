package main

import "errors"

// kafkaStateCmd groups the kafka-state commands (owned by tasks/kafkastate).
type kafkaStateCmd struct {
	Setup       kafkaStateSetupCmd       `cmd:"" help:"Create schema kafka_state (positions, records, current_values). Idempotent."`
	Materialize kafkaStateMaterializeCmd `cmd:"" help:"Materialize one bounded batch of the topic into PostgreSQL."`
	Verify      kafkaStateVerifyCmd      `cmd:"" help:"Check that every stored record is below its partition's durable next offset."`
}

type kafkaStateSetupCmd struct{}
type kafkaStateMaterializeCmd struct{}
type kafkaStateVerifyCmd struct{}

func (kafkaStateSetupCmd) Run(*app) error       { return errors.New("not implemented yet") }
func (kafkaStateMaterializeCmd) Run(*app) error { return errors.New("not implemented yet") }
func (kafkaStateVerifyCmd) Run(*app) error      { return errors.New("not implemented yet") }
