package target

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/changesink/changesink/internal/outcome"
	"github.com/changesink/changesink/tasks/cdc/change"
)

// probeURLSettings sends CLICKHOUSE_URL's query-string settings with one
// SELECT 1, before the run's first real query. Since 19.x a setting
// travels as text and the server parses it with each query; a value it
// cannot take (max_block_size=abc) failed that first query with a parse
// error naming no setting (26.9: code 27, CANNOT_PARSE_INPUT_ASSERTION_FAILED;
// code 72 for a negative unsigned), which was internal (exit 4) and said
// nothing of the URL. A failure classify leaves unmarked is refused here as
// a configuration error naming the settings; the server's message is left
// out, as it quotes the value, which may be a secret. Without settings
// nothing is sent. (Before 19.x, checkURLSettings refuses what the
// protocol cannot carry.)
func probeURLSettings(ctx context.Context, conn driver.Conn, settings clickhouse.Settings, version string) error {
	if len(settings) == 0 {
		return nil
	}
	err := conn.Exec(ctx, "SELECT 1")
	if err == nil {
		return nil
	}
	err = classify(fmt.Errorf("ClickHouse %s refused a setting of %s's query string: %w", version, EnvClickHouseURL, err))
	return settingsRefused(err, settings, "ClickHouse "+version)
}

// settingsRefused returns err, classified, as a configuration error naming
// the settings when it is a ClickHouse exception classify leaves unmarked,
// from the first query to carry the settings: probeURLSettings's, or over
// HTTP the connection's own first query (clickhouse-go's hello, which
// carries them). server names the server.
func settingsRefused(err error, settings clickhouse.Settings, server string) error {
	if len(settings) == 0 || outcome.Classify(err) != outcome.Internal {
		return err
	}
	ex, ok := chException(err)
	if !ok {
		return err
	}
	name := ex.CodeName
	if name == "" {
		name = "code " + fmt.Sprint(ex.Code)
	} else {
		name = fmt.Sprintf("code %d, %s", ex.Code, name)
	}
	return outcome.Config.Mark(fmt.Errorf("%w: a setting in %s's query string (%s) has a value %s cannot take (%s)",
		change.ErrConfig, EnvClickHouseURL, strings.Join(slices.Sorted(maps.Keys(settings)), ", "), server, name))
}
