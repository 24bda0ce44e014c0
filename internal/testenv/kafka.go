package testenv

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/changesink/changesink/internal/kafkatest"
)

// CreateTopic creates topic name through adm with the given partitions
// (replication factor 1) and configs, waits until every partition has a
// leader, and deletes the topic when the test ends; a topic the test
// deleted itself is no failure then. Cleanups run last first: register the
// client's Close before calling it.
func CreateTopic(t testing.TB, adm *kadm.Client, name string, partitions int32, configs map[string]*string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := adm.CreateTopic(ctx, partitions, 1, configs, name); err != nil {
		t.Fatalf("create topic %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := adm.DeleteTopic(ctx, name); err != nil && !errors.Is(err, kerr.UnknownTopicOrPartition) {
			t.Errorf("delete the test topic %s: %v", name, err)
		}
	})
	WaitForLeaders(t, adm, name, int(partitions))
}

// WaitForLeaders waits (up to a minute) until every one of the topic's
// partitions has a leader (kafkatest.WaitLeaders): metadata lags a topic's
// creation and a change of its partition count.
func WaitForLeaders(t testing.TB, adm *kadm.Client, name string, partitions int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := kafkatest.WaitLeaders(ctx, adm, name, partitions); err != nil {
		t.Fatal(err)
	}
}
