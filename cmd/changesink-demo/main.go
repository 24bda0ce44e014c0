// Command changesink-demo creates real input for changesink's two jobs, so a new
// user sees both work end to end (.ci/demo on this machine, the `demo` service of
// docker-compose.yml on a machine with Docker):
//
//	changesink-demo kafka   keyed JSON records, updates, tombstones and one aborted
//	                        transaction on a compacted topic (input of kafka-state)
//	changesink-demo orders  inserts, updates and deletes on public.orders; with
//	                        --capture FILE it also reads those changes back from
//	                        PostgreSQL's WAL (logical decoding, pgoutput) and writes
//	                        them as the Debezium INLINE Ion batch that Kestra's
//	                        Debezium Postgres trigger would hand the cdc flow
//	                        (input of cdc apply)
//
// It is a demo and test-data tool, not part of the changesink image.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/alecthomas/kong"
)

type cli struct {
	Kafka  kafkaCmd  `cmd:"" help:"Write keyed JSON records, tombstones and an aborted transaction to a compacted topic."`
	Orders ordersCmd `cmd:"" help:"Insert, update and delete public.orders rows; with --capture, write their WAL changes as a Debezium INLINE Ion batch."`
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var c cli
	k := kong.Parse(&c,
		kong.Name("changesink-demo"),
		kong.Description("Create demo input for changesink's kafka-state and cdc jobs."),
		kong.UsageOnError(),
		kong.BindTo(ctx, (*context.Context)(nil)),
	)
	if err := k.Run(); err != nil {
		fmt.Fprintf(os.Stderr, "changesink-demo: %v\n", err)
		os.Exit(1)
	}
}
