package kafkastate

import (
	"context"
	"net"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/changesink/changesink/internal/outcome"
	"github.com/changesink/changesink/internal/testenv"
)

// TestRetentionFrom: how a describe configs answer becomes the tombstone
// rule's retention, and each answer Kafka would not give is refused with
// its kind and remedy (nothing is committed: materialize reads it first).
func TestRetentionFrom(t *testing.T) {
	str := func(s string) *string { return &s }
	answer := func(code int16, configs map[string]*string) *kmsg.DescribeConfigsResponse {
		res := kmsg.NewDescribeConfigsResponseResource()
		res.ErrorCode = code
		res.ResourceName = "orders"
		for name, v := range configs {
			c := kmsg.NewDescribeConfigsResponseResourceConfig()
			c.Name, c.Value = name, v
			res.Configs = append(res.Configs, c)
		}
		resp := kmsg.NewPtrDescribeConfigsResponse()
		resp.Resources = append(resp.Resources, res)
		return resp
	}
	both := func(policy, ms string) map[string]*string {
		return map[string]*string{"cleanup.policy": str(policy), "delete.retention.ms": str(ms)}
	}
	for _, tc := range []struct {
		name string
		resp *kmsg.DescribeConfigsResponse
		want retention
		kind outcome.Kind
		is   error
		says []string
	}{
		{name: "compact", resp: answer(0, both("compact", "86400000")),
			want: retention{policy: "compact", compact: true, deleteRetentionMs: 86400000}},
		{name: "compact and delete, spaced and upper case", resp: answer(0, both("delete, COMPACT", " 0 ")),
			want: retention{policy: "delete, COMPACT", compact: true, deleteRetentionMs: 0}},
		{name: "delete only", resp: answer(0, both("delete", "100")),
			want: retention{policy: "delete", deleteRetentionMs: 100}},
		{name: "no resources", resp: kmsg.NewPtrDescribeConfigsResponse(),
			kind: outcome.Transient, is: ErrKafkaNotReady, says: []string{`topic "orders"`, "0 resources in the answer, want 1", "Retry"}},
		{name: "not authorized", resp: answer(kerr.TopicAuthorizationFailed.Code, nil),
			kind: outcome.Config, is: kerr.TopicAuthorizationFailed, says: []string{"the client needs DESCRIBE_CONFIGS on the topic", "Grant the client"}},
		{name: "cluster not authorized", resp: answer(kerr.ClusterAuthorizationFailed.Code, nil),
			kind: outcome.Config, is: kerr.ClusterAuthorizationFailed, says: []string{"DESCRIBE_CONFIGS"}},
		{name: "unknown topic", resp: answer(kerr.UnknownTopicOrPartition.Code, nil),
			kind: outcome.Refused, is: ErrTopicUnavailable, says: []string{"Check TOPIC"}},
		{name: "retriable", resp: answer(kerr.NotController.Code, nil),
			kind: outcome.Transient, is: kerr.NotController, says: []string{"Retry"}},
		{name: "other broker error", resp: answer(kerr.InvalidRequest.Code, nil),
			kind: outcome.Internal, is: kerr.InvalidRequest, says: []string{"kafka describe configs"}},
		{name: "retention not a number", resp: answer(0, both("compact", "a day")),
			kind: outcome.Internal, is: ErrTopicConfig, says: []string{`delete.retention.ms "a day", not a non-negative integer`, "kafka-configs --alter", "Nothing was committed"}},
		{name: "negative retention", resp: answer(0, both("compact", "-1")),
			kind: outcome.Internal, says: []string{`delete.retention.ms "-1"`}},
		{name: "policy missing", resp: answer(0, map[string]*string{"delete.retention.ms": str("1")}),
			kind: outcome.Internal, is: ErrTopicConfig, says: []string{"lacks cleanup.policy or delete.retention.ms", "report it with the broker's version"}},
		{name: "retention null", resp: answer(0, map[string]*string{"cleanup.policy": str("compact"), "delete.retention.ms": nil}),
			kind: outcome.Internal, says: []string{"lacks cleanup.policy or delete.retention.ms"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := retentionFrom("orders", tc.resp)
			if tc.says == nil {
				if err != nil || got != tc.want {
					t.Fatalf("retentionFrom = %+v, %v; want %+v", got, err, tc.want)
				}
				return
			}
			if err == nil {
				t.Fatalf("retentionFrom = %+v, want an error", got)
			}
			testenv.CheckHinted(t, err, Hint, tc.kind, tc.is, tc.says...)
		})
	}
}

// TestHTTPPortIsAConfigError: bootstrap.servers naming an HTTP port gets an
// answer whose size bytes are "HTTP" (an HTTP server answers the Kafka
// request it cannot parse with 400 Bad Request, as nginx does); franz-go
// says so in text only, and changesink makes it a configuration error
// naming the setting, since a retry cannot help.
func TestHTTPPortIsAConfigError(t *testing.T) {
	addr := testenv.ServeLocal(t, func(c net.Conn) {
		_, _ = c.Read(make([]byte, 512))
		_, _ = c.Write([]byte("HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"))
	})
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.RequestRetries(0))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	_, err = describeTopic(context.Background(), cl, "orders")
	testenv.WantHinted(t, err, Hint, outcome.Config, ErrKafkaNotPlaintext, addr, "'HTTP' in ascii", "bootstrap.servers names another service's port")
}

// TestKafkaCodeErr: the class and remedy of every Kafka error code a run
// acts on, for each request that can get it (kafkaCodeErr, the one place
// that decides them).
func TestKafkaCodeErr(t *testing.T) {
	oor := &OffsetError{Topic: "orders", Partition: 2, Saved: 7, LogStart: -1, End: -1, Fetched: true, FetchOffset: 9}
	tests := []struct {
		name string
		req  kafkaRequest
		code error
		oor  *OffsetError
		kind outcome.Kind
		is   error
		says []string
	}{
		{"SASL authentication failed", metadataRequest, kerr.SaslAuthenticationFailed, nil, outcome.Config, kerr.SaslAuthenticationFailed,
			[]string{`topic "orders" partition 2: where: `, "Check sasl.mechanism, sasl.username and sasl.password in KAFKA_PROPERTIES"}},
		{"unsupported SASL mechanism", metadataRequest, kerr.UnsupportedSaslMechanism, nil, outcome.Config, ErrKafkaSASL, []string{"sasl.mechanism"}},
		{"metadata not authorized", metadataRequest, kerr.TopicAuthorizationFailed, nil, outcome.Config, kerr.TopicAuthorizationFailed,
			[]string{"the client needs DESCRIBE on the topic", "Grant the client the ACL the message names"}},
		{"describe configs not authorized", describeConfigsRequest, kerr.TopicAuthorizationFailed, nil, outcome.Config, ErrKafkaNotAuthorized,
			[]string{"the client needs DESCRIBE_CONFIGS on the topic"}},
		{"list offsets not authorized", listOffsetsRequest, kerr.ClusterAuthorizationFailed, nil, outcome.Config, ErrKafkaNotAuthorized,
			[]string{"the client needs READ and DESCRIBE on the topic"}},
		{"fetch not authorized", fetchRequest, kerr.TopicAuthorizationFailed, nil, outcome.Config, ErrKafkaNotAuthorized,
			[]string{"the client needs READ and DESCRIBE on the topic"}},
		{"topic unknown to describe configs", describeConfigsRequest, kerr.UnknownTopicOrPartition, nil, outcome.Refused, ErrTopicUnavailable,
			[]string{"Check TOPIC"}},
		{"topic gone during list offsets", listOffsetsRequest, kerr.UnknownTopicOrPartition, nil, outcome.Refused, ErrTopicChanged,
			[]string{"nothing was committed", "rebuild into an empty destination"}},
		{"topic id replaced during the fetch", fetchRequest, kerr.InconsistentTopicID, nil, outcome.Refused, ErrTopicChanged,
			[]string{"INCONSISTENT_TOPIC_ID"}},
		{"fetched offset out of range", fetchRequest, kerr.OffsetOutOfRange, oor, outcome.Refused, ErrOffsetOutOfRange,
			[]string{"fetch at offset 9 with OFFSET_OUT_OF_RANGE"}},
		{"offset out of range where no request asks for one", listOffsetsRequest, kerr.OffsetOutOfRange, nil, outcome.Internal, kerr.OffsetOutOfRange, nil},
		{"leader moved", fetchRequest, kerr.NotLeaderForPartition, nil, outcome.Transient, ErrKafkaNotReady, []string{"NOT_LEADER_FOR_PARTITION", "Retry"}},
		{"an unforeseen code", listOffsetsRequest, kerr.InvalidRequest, nil, outcome.Internal, kerr.InvalidRequest, []string{`topic "orders" partition 2: where: `}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			where := TopicError{Topic: "orders", Partition: 2, Offset: -1, Op: "where"}
			testenv.WantHinted(t, kafkaCodeErr(tt.req, where, tt.code, tt.oor), Hint, tt.kind, tt.is, tt.says...)
		})
	}
}
