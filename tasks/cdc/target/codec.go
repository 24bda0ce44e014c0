package target

import (
	"fmt"
	"math"
	"math/big"
	"time"

	"github.com/changesink/changesink/tasks/cdc/change"
	"github.com/changesink/changesink/tasks/cdc/mapping"

	"github.com/google/uuid"
	"github.com/shopspring/decimal"
)

// codec moves one column between canonical values and the Go types
// clickhouse-go appends and scans for the column's stored type.
type codec struct {
	// dest returns a fresh scan destination (reused across rows).
	dest func() any
	// value converts a scanned destination to a canonical value.
	value func(dest any) (change.Value, error)
	// slice converts canonical values to a typed slice for a columnar append.
	slice func(vals []change.Value) any
}

// makeCodec builds a codec for Go type T; Nullable columns scan into **T and
// append []*T.
func makeCodec[T any](nullable bool, to func(change.Value) T, from func(T) (change.Value, error)) codec {
	if nullable {
		return codec{
			dest: func() any { return new(*T) },
			value: func(d any) (change.Value, error) {
				p := *(d.(**T))
				if p == nil {
					return change.Value{Null: true}, nil
				}
				return from(*p)
			},
			slice: func(vals []change.Value) any {
				out := make([]*T, len(vals))
				for i := range vals {
					if !vals[i].Null {
						x := to(vals[i])
						out[i] = &x
					}
				}
				return out
			},
		}
	}
	return codec{
		dest:  func() any { return new(T) },
		value: func(d any) (change.Value, error) { return from(*(d.(*T))) },
		slice: func(vals []change.Value) any {
			out := make([]T, len(vals))
			for i := range vals {
				out[i] = to(vals[i])
			}
			return out
		},
	}
}

func intCodec[T int8 | int16 | int32 | int64](nullable bool) codec {
	return makeCodec(nullable,
		func(v change.Value) T { return T(int64(v.N)) },
		func(x T) (change.Value, error) { return change.Value{N: uint64(int64(x))}, nil })
}

func uintCodec[T uint8 | uint16 | uint32 | uint64](nullable bool) codec {
	return makeCodec(nullable,
		func(v change.Value) T { return T(v.N) },
		func(x T) (change.Value, error) { return change.Value{N: uint64(x)}, nil })
}

// byBits picks, by an integer column's width in bits, the codec of the Go
// integer type of that width (c64 for 64).
func byBits(bits int, c8, c16, c32, c64 func(nullable bool) codec) func(nullable bool) codec {
	switch bits {
	case 8:
		return c8
	case 16:
		return c16
	case 32:
		return c32
	}
	return c64
}

// codecFor returns the codec of a mapped column as the target stores it;
// asUInt8 says a Bool column is stored as UInt8 (made before 21.12).
func codecFor(c *mapping.Col, asUInt8 bool) (codec, error) {
	t := c.Type
	nb := t.Nullable
	switch t.Kind {
	case mapping.KindInt:
		return byBits(t.Bits, intCodec[int8], intCodec[int16], intCodec[int32], intCodec[int64])(nb), nil
	case mapping.KindUint:
		return byBits(t.Bits, uintCodec[uint8], uintCodec[uint16], uintCodec[uint32], uintCodec[uint64])(nb), nil
	case mapping.KindFloat32:
		return makeCodec(nb,
			func(v change.Value) float32 { return float32(math.Float64frombits(v.N)) },
			func(x float32) (change.Value, error) { return change.FloatValue(float64(x)), nil }), nil
	case mapping.KindFloat64:
		return makeCodec(nb,
			func(v change.Value) float64 { return math.Float64frombits(v.N) },
			func(x float64) (change.Value, error) { return change.FloatValue(x), nil }), nil
	case mapping.KindDecimal:
		return makeCodec(nb,
			func(v change.Value) decimal.Decimal {
				n, _ := new(big.Int).SetString(v.S, 10)
				if n == nil {
					n = new(big.Int)
				}
				return decimal.NewFromBigInt(n, int32(-t.Scale))
			},
			func(x decimal.Decimal) (change.Value, error) {
				n, err := change.Rescale(x.Coefficient(), int64(x.Exponent()), t)
				if err != nil {
					return change.Value{}, err
				}
				return change.Value{S: n.String()}, nil
			}), nil
	case mapping.KindString:
		return makeCodec(nb,
			func(v change.Value) string { return v.S },
			func(x string) (change.Value, error) { return change.Value{S: x}, nil }), nil
	case mapping.KindBool:
		if asUInt8 {
			return makeCodec(nb,
				func(v change.Value) uint8 { return uint8(v.N) },
				func(x uint8) (change.Value, error) {
					if x > 1 {
						return change.Value{}, fmt.Errorf("a Bool column stored as UInt8 holds %d", x)
					}
					return change.Value{N: uint64(x)}, nil
				}), nil
		}
		return makeCodec(nb,
			func(v change.Value) bool { return v.N != 0 },
			func(x bool) (change.Value, error) {
				if x {
					return change.Value{N: 1}, nil
				}
				return change.Value{}, nil
			}), nil
	case mapping.KindDate:
		return makeCodec(nb,
			func(v change.Value) time.Time { return time.Unix(int64(v.N)*86400, 0).UTC() },
			func(x time.Time) (change.Value, error) {
				days := time.Date(x.Year(), x.Month(), x.Day(), 0, 0, 0, 0, time.UTC).Unix() / 86400
				return change.Value{N: uint64(days)}, nil
			}), nil
	case mapping.KindDateTime:
		// Seconds as int64, exact both ways.
		return makeCodec(nb,
			func(v change.Value) int64 { return int64(v.N) },
			func(x int64) (change.Value, error) { return change.Value{N: uint64(x)}, nil }), nil
	case mapping.KindDateTime64:
		// Ticks of 10^-precision s as a time.Time, exact both ways (a
		// time.Time holds nanoseconds). Not as int64: clickhouse-go scans a
		// DateTime64 into int64 as ticks, but appends an int64 as Unix
		// milliseconds whatever the precision (a DateTime64(6) got every
		// value 1000 times too far from 1970: found on ClickHouse 26.9).
		per := t.TicksPerSecond()
		return makeCodec(nb,
			func(v change.Value) time.Time { return change.TicksTime(int64(v.N), t) },
			func(x time.Time) (change.Value, error) {
				return change.Value{N: uint64(x.Unix()*per + int64(x.Nanosecond())/(1_000_000_000/per))}, nil
			}), nil
	case mapping.KindUUID:
		return makeCodec(nb,
			func(v change.Value) uuid.UUID {
				var u uuid.UUID
				copy(u[:], v.S)
				return u
			},
			func(x uuid.UUID) (change.Value, error) { return change.Value{S: string(x[:])}, nil }), nil
	}
	return codec{}, fmt.Errorf("no codec for column %q", c.Name)
}
