package kafkastate

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/changesink/changesink/internal/outcome"
)

// kafkaTimeout bounds each metadata and offsets request, as the seed's
// timeout=15 / request_timeout=15.
const kafkaTimeout = 15 * time.Second

// TopicIDText returns a topic id in the seed's text form: librdkafka's
// rd_kafka_Uuid_base64str (what confluent-kafka's str(Uuid) prints), that is
// standard base64 without padding, 22 characters. Not kadm's form (padded)
// nor Java's Uuid.toString (URL-safe alphabet).
func TopicIDText(id [16]byte) string { return base64.RawStdEncoding.EncodeToString(id[:]) }

// zeroTopicID is the all-zero id in text form, which the seed refuses.
var zeroTopicID = TopicIDText([16]byte{})

// topicMeta is one fresh, uncached metadata answer for the topic.
type topicMeta struct {
	clusterID  string
	topicID    [16]byte
	partitions []int32         // sorted
	leaders    map[int32]int32 // partition → leader broker id
}

func (m topicMeta) topicIDText() string { return TopicIDText(m.topicID) }

// newClient builds a franz-go client with no consumer, no group and no
// producer: every request changesink sends is explicit.
func newClient(props Properties) (*kgo.Client, error) {
	opts, err := props.clientOpts()
	if err != nil {
		return nil, err
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, outcome.Config.Mark(fmt.Errorf("kafka client: %w", err))
	}
	return cl, nil
}

// kafkaRequest is a request changesink sends to Kafka: what an error code
// in its answer means depends on it (kafkaCodeErr).
type kafkaRequest int

const (
	metadataRequest kafkaRequest = iota
	describeConfigsRequest
	listOffsetsRequest
	fetchRequest
)

// String names the request in messages.
func (r kafkaRequest) String() string {
	switch r {
	case describeConfigsRequest:
		return "describe configs"
	case listOffsetsRequest:
		return "list offsets"
	case fetchRequest:
		return "fetch"
	}
	return "metadata"
}

// acl is what the client must be granted, where the broker has an
// authorizer, to send r; list offsets and fetch both name READ and
// DESCRIBE, which a batch needs for the two.
func (r kafkaRequest) acl() string {
	switch r {
	case describeConfigsRequest:
		return "DESCRIBE_CONFIGS on the topic"
	case listOffsetsRequest, fetchRequest:
		return "READ and DESCRIBE on the topic"
	}
	return "DESCRIBE on the topic"
}

// codeCause is the one place that decides what a Kafka error code means to
// a run, whichever request got it (req): a code in an answer
// (kerr.ErrorForCode of a resource's or a partition's ErrorCode), or one
// the connection's SASL handshake failed with. It returns the class and
// the cause (a sentinel of this package); ok is false for a code a run
// does not foresee (internal).
//
//   - SASL failures and authorization failures are configuration errors.
//   - A topic or topic id the broker does not know is refused:
//     ErrTopicUnavailable when the topic's configs are read (check TOPIC),
//     ErrTopicChanged once its offsets are read (deleted or recreated
//     during the batch).
//   - Any other retriable code (a leader moving, a broker starting) is
//     transient.
//
// OFFSET_OUT_OF_RANGE is kafkaCodeErr's to decide.
func codeCause(req kafkaRequest, code error) (outcome.Kind, error, bool) {
	switch {
	case errors.Is(code, kerr.SaslAuthenticationFailed), errors.Is(code, kerr.IllegalSaslState), errors.Is(code, kerr.UnsupportedSaslMechanism):
		return outcome.Config, ErrKafkaSASL, true
	case errors.Is(code, kerr.TopicAuthorizationFailed), errors.Is(code, kerr.ClusterAuthorizationFailed):
		return outcome.Config, ErrKafkaNotAuthorized, true
	case errors.Is(code, kerr.UnknownTopicOrPartition), errors.Is(code, kerr.UnknownTopicID), errors.Is(code, kerr.InconsistentTopicID):
		if req == listOffsetsRequest || req == fetchRequest {
			return outcome.Refused, ErrTopicChanged, true
		}
		return outcome.Refused, ErrTopicUnavailable, true
	case errors.Is(code, kerr.OffsetOutOfRange):
		return outcome.Internal, nil, false
	case kerr.IsRetriable(code):
		return outcome.Transient, ErrKafkaNotReady, true
	}
	return outcome.Internal, nil, false
}

// kafkaCodeErr is the error of a Kafka error code in the answer to req
// (codeCause decides it) about the topic or the partition where names: a
// *TopicError whose Err is the cause and whose Cause is the code, marked
// with the cause's class; for authorization it names the ACL req needs.
// oor is the refusal of OFFSET_OUT_OF_RANGE, naming the offsets asked for,
// nil for a request whose answer does not carry that code. A code a run
// does not foresee is returned unmarked: internal.
func kafkaCodeErr(req kafkaRequest, where TopicError, code error, oor *OffsetError) error {
	if errors.Is(code, kerr.OffsetOutOfRange) && oor != nil {
		return outcome.Refused.Mark(oor)
	}
	e := &where
	kind, cause, ok := codeCause(req, code)
	if !ok {
		e.Err = code
		return e
	}
	e.Err, e.Cause = cause, code
	if cause == ErrKafkaNotAuthorized {
		e.Detail = "the client needs " + req.acl()
	}
	return kind.Mark(e)
}

// kafkaRequestErr classifies a failed request to broker about topic (a
// *KafkaError): a broker that closed the connection during the TLS
// handshake (a plaintext listener), a port that answers with a TLS alert
// or HTTP (notKafkaAnswer) and TLS handshakes that cannot succeed are
// configuration errors; a Kafka error code (the SASL handshake's) is as
// codeCause says; anything else (a broker down, a timeout, a dropped
// connection) is transient.
func kafkaRequestErr(req kafkaRequest, err error, topic, broker string) error {
	e := &KafkaError{Request: req.String(), Topic: topic, Broker: broker, Err: err}
	var (
		handshakeEOF *tlsHandshakeEOF
		code         *kerr.Error
	)
	switch {
	case errors.As(err, &handshakeEOF):
		e.Cause = ErrKafkaNotTLS
		return outcome.Config.Mark(e)
	case notKafkaAnswer(err):
		e.Cause = ErrKafkaNotPlaintext
		return outcome.Config.Mark(e)
	case outcome.TLSFailure(err):
		e.Cause = ErrKafkaTLS
		return outcome.Config.Mark(e)
	case errors.As(err, &code):
		kind, cause, ok := codeCause(req, err)
		if !ok {
			return e
		}
		e.Cause = cause
		return kind.Mark(e)
	}
	if errors.Is(err, context.Canceled) {
		// The run was stopped: the broker is not to blame (materialize says so).
		return outcome.Transient.Mark(e)
	}
	e.Cause = ErrKafkaUnreachable
	return outcome.Transient.Mark(e)
}

// notKafkaAnswer reports franz-go's refusal of a broker's first bytes as a
// response size over its limit that it recognised as a TLS alert record or
// the start of an HTTP answer: the port speaks another protocol, and a
// retry cannot help. franz-go returns it as text alone (kgo's broker.go,
// "invalid large response size"); TestTLS pins the wording against the
// real SSL listener, so a franz-go upgrade that changes it fails there.
func notKafkaAnswer(err error) bool {
	s := err.Error()
	return strings.Contains(s, "invalid large response size") &&
		(strings.Contains(s, "tls alert record") || strings.Contains(s, "'HTTP' in ascii"))
}

// describeTopic sends a Metadata request for the topic straight to a broker
// (kmsg request through kgo.Client.Request, which bypasses franz-go's
// metadata cache) and checks it as the seed does: the topic exists, has no
// error and has partitions (ErrTopicUnavailable); the cluster id is set and
// the topic id is not all zero (ErrNoIDs). For an unknown topic the
// returned topicMeta holds the cluster id alone.
func describeTopic(ctx context.Context, cl *kgo.Client, topic string) (topicMeta, error) {
	ctx, cancel := context.WithTimeout(ctx, kafkaTimeout)
	defer cancel()
	req := kmsg.NewPtrMetadataRequest()
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = kmsg.StringPtr(topic)
	req.Topics = []kmsg.MetadataRequestTopic{rt}
	req.AllowAutoTopicCreation = false
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		// The first request of a run: name the brokers, where a TLS or
		// SASL failure shows.
		brokers, _ := cl.OptValue(kgo.SeedBrokers).([]string)
		return topicMeta{}, kafkaRequestErr(metadataRequest, err, topic, strings.Join(brokers, ","))
	}
	var t *kmsg.MetadataResponseTopic
	for i := range resp.Topics {
		if resp.Topics[i].Topic != nil && *resp.Topics[i].Topic == topic {
			t = &resp.Topics[i]
		}
	}
	if t == nil {
		return topicMeta{}, outcome.Refused.Mark(topicErr(topic, ErrTopicUnavailable, "the broker did not describe it"))
	}
	if err := kerr.ErrorForCode(t.ErrorCode); err != nil {
		// The seed refuses whatever error the topic's metadata carries
		// ('Topic metadata is unavailable'), whatever class kafkaCodeErr
		// would give the code. The cluster id still comes with the answer
		// (unknownTopic compares it).
		e := topicErr(topic, ErrTopicUnavailable, "")
		e.Cause = err
		return topicMeta{clusterID: clusterID(resp)}, outcome.Refused.Mark(e)
	}
	if len(t.Partitions) == 0 {
		return topicMeta{}, outcome.Refused.Mark(topicErr(topic, ErrTopicUnavailable, "it has no partitions"))
	}
	m := topicMeta{topicID: t.TopicID, clusterID: clusterID(resp), leaders: map[int32]int32{}}
	if m.clusterID == "" || m.topicIDText() == zeroTopicID {
		return topicMeta{}, outcome.Refused.Mark(topicErr(topic, ErrNoIDs,
			fmt.Sprintf("cluster id %q, topic id %s", m.clusterID, m.topicIDText())))
	}
	for _, p := range t.Partitions {
		m.partitions = append(m.partitions, p.Partition)
		m.leaders[p.Partition] = p.Leader
	}
	slices.Sort(m.partitions)
	return m, nil
}

// clusterID is the cluster id of a Metadata response, "" when it has none.
func clusterID(resp *kmsg.MetadataResponse) string {
	if resp.ClusterID == nil {
		return ""
	}
	return *resp.ClusterID
}

// retention is what a topic's configs say about how long its records stay
// (DescribeConfigs, the values in force: the topic's own or the broker's
// default).
type retention struct {
	// policy is cleanup.policy as the broker reports it ("compact",
	// "delete", "compact,delete", ...).
	policy string
	// compact: the policy includes compact, so the cleaner removes
	// superseded records and, delete.retention.ms after its first pass over
	// them, tombstones.
	compact bool
	// deleteRetentionMs is delete.retention.ms.
	deleteRetentionMs int64
}

// describeRetention reads the topic's cleanup.policy and delete.retention.ms
// with a DescribeConfigs request (which needs the DESCRIBE_CONFIGS
// operation on the topic where the broker has an authorizer).
func describeRetention(ctx context.Context, cl *kgo.Client, topic string) (retention, error) {
	ctx, cancel := context.WithTimeout(ctx, kafkaTimeout)
	defer cancel()
	req := kmsg.NewPtrDescribeConfigsRequest()
	res := kmsg.NewDescribeConfigsRequestResource()
	res.ResourceType = kmsg.ConfigResourceTypeTopic
	res.ResourceName = topic
	res.ConfigNames = []string{"cleanup.policy", "delete.retention.ms"}
	req.Resources = []kmsg.DescribeConfigsRequestResource{res}
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return retention{}, kafkaRequestErr(describeConfigsRequest, err, topic, "")
	}
	return retentionFrom(topic, resp)
}

// retentionFrom reads the topic's cleanup.policy and delete.retention.ms
// from a describe configs answer, refusing an answer Kafka would not give.
func retentionFrom(topic string, resp *kmsg.DescribeConfigsResponse) (retention, error) {
	if len(resp.Resources) != 1 {
		e := topicErr(topic, ErrKafkaNotReady, fmt.Sprintf("%d resources in the answer, want 1", len(resp.Resources)))
		e.Op = "kafka describe configs"
		return retention{}, outcome.Transient.Mark(e)
	}
	r := resp.Resources[0]
	if err := kerr.ErrorForCode(r.ErrorCode); err != nil {
		return retention{}, kafkaCodeErr(describeConfigsRequest, TopicError{Topic: topic, Partition: -1, Offset: -1, Op: "kafka describe configs"}, err, nil)
	}
	var (
		out                   retention
		hasPolicy, hasRetains bool
	)
	for _, c := range r.Configs {
		if c.Value == nil {
			continue
		}
		switch c.Name {
		case "cleanup.policy":
			out.policy, hasPolicy = *c.Value, true
			for _, p := range strings.Split(out.policy, ",") {
				if strings.EqualFold(strings.TrimSpace(p), "compact") {
					out.compact = true
				}
			}
		case "delete.retention.ms":
			n, err := strconv.ParseInt(strings.TrimSpace(*c.Value), 10, 64)
			if err != nil || n < 0 {
				return retention{}, topicErr(topic, ErrTopicConfig, fmt.Sprintf("delete.retention.ms %q, not a non-negative integer", *c.Value))
			}
			out.deleteRetentionMs, hasRetains = n, true
		}
	}
	if !hasPolicy || !hasRetains {
		return retention{}, topicErr(topic, ErrTopicConfig, "the answer lacks cleanup.policy or delete.retention.ms")
	}
	return out, nil
}

// watermarks are one partition's log start offset, last stable offset
// (the read_committed end: what the seed's get_watermark_offsets returns as
// "high" under isolation.level=read_committed) and high watermark (the end
// of the log, open transactions included: the lag's end).
type watermarks struct{ logStart, lso, hwm int64 }

// listWatermarks asks each partition's leader for its log start offset
// (timestamp -2), its last stable offset (timestamp -1 with isolation level
// read_committed) and its high watermark (timestamp -1, read_uncommitted).
func listWatermarks(ctx context.Context, cl *kgo.Client, topic string, m topicMeta) (map[int32]watermarks, error) {
	ctx, cancel := context.WithTimeout(ctx, kafkaTimeout)
	defer cancel()
	byLeader := map[int32][]int32{}
	for _, p := range m.partitions {
		leader := m.leaders[p]
		if leader < 0 {
			return nil, outcome.Transient.Mark(&TopicError{Topic: topic, Partition: p, Offset: -1, Err: ErrKafkaNotReady, Detail: "the partition has no leader"})
		}
		byLeader[leader] = append(byLeader[leader], p)
	}
	out := make(map[int32]watermarks, len(m.partitions))
	for leader, parts := range byLeader {
		for _, q := range []struct {
			ts        int64
			isolation int8
		}{{-2, 1}, {-1, 1}, {-1, 0}} {
			req := kmsg.NewPtrListOffsetsRequest()
			req.IsolationLevel = q.isolation
			rt := kmsg.NewListOffsetsRequestTopic()
			rt.Topic = topic
			for _, p := range parts {
				rp := kmsg.NewListOffsetsRequestTopicPartition()
				rp.Partition = p
				rp.Timestamp = q.ts
				rt.Partitions = append(rt.Partitions, rp)
			}
			req.Topics = []kmsg.ListOffsetsRequestTopic{rt}
			resp, err := req.RequestWith(ctx, cl.Broker(int(leader)))
			if err != nil {
				return nil, kafkaRequestErr(listOffsetsRequest, err, topic, "broker "+strconv.Itoa(int(leader)))
			}
			for _, t := range resp.Topics {
				for _, rp := range t.Partitions {
					if err := kerr.ErrorForCode(rp.ErrorCode); err != nil {
						// ListOffsets does not answer OFFSET_OUT_OF_RANGE.
						return nil, kafkaCodeErr(listOffsetsRequest, TopicError{Topic: topic, Partition: rp.Partition, Offset: -1, Op: "kafka list offsets"}, err, nil)
					}
					w := out[rp.Partition]
					switch {
					case q.ts == -2:
						w.logStart = rp.Offset
					case q.isolation == 1:
						w.lso = rp.Offset
					default:
						w.hwm = rp.Offset
					}
					out[rp.Partition] = w
				}
			}
		}
	}
	for _, p := range m.partitions {
		if _, ok := out[p]; !ok {
			return nil, outcome.Transient.Mark(&TopicError{Topic: topic, Partition: p, Offset: -1, Op: "kafka list offsets", Err: ErrKafkaNotReady,
				Detail: "no answer for the partition"})
		}
	}
	return out, nil
}
