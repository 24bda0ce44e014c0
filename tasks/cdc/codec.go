package cdc

import (
	"fmt"
	"math"
	"math/big"
	"time"

	"github.com/google/uuid"
	"github.com/shopspring/decimal"
)

// codec moves one column between canonical values and the Go types
// clickhouse-go appends and scans for the column's stored type.
type codec struct {
	// dest returns a fresh scan destination (reused across rows).
	dest func() any
	// value converts a scanned destination to a canonical value.
	value func(dest any) (value, error)
	// slice converts canonical values to a typed slice for a columnar append.
	slice func(vals []value) any
}

// makeCodec builds a codec for Go type T; Nullable columns scan into **T and
// append []*T.
func makeCodec[T any](nullable bool, to func(value) T, from func(T) (value, error)) codec {
	if nullable {
		return codec{
			dest: func() any { return new(*T) },
			value: func(d any) (value, error) {
				p := *(d.(**T))
				if p == nil {
					return value{null: true}, nil
				}
				return from(*p)
			},
			slice: func(vals []value) any {
				out := make([]*T, len(vals))
				for i := range vals {
					if !vals[i].null {
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
		value: func(d any) (value, error) { return from(*(d.(*T))) },
		slice: func(vals []value) any {
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
		func(v value) T { return T(int64(v.n)) },
		func(x T) (value, error) { return value{n: uint64(int64(x))}, nil })
}

func uintCodec[T uint8 | uint16 | uint32 | uint64](nullable bool) codec {
	return makeCodec(nullable,
		func(v value) T { return T(v.n) },
		func(x T) (value, error) { return value{n: uint64(x)}, nil })
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
func codecFor(c *colSpec, asUInt8 bool) (codec, error) {
	t := c.typ
	nb := t.nullable
	switch t.kind {
	case kindInt:
		return byBits(t.bits, intCodec[int8], intCodec[int16], intCodec[int32], intCodec[int64])(nb), nil
	case kindUint:
		return byBits(t.bits, uintCodec[uint8], uintCodec[uint16], uintCodec[uint32], uintCodec[uint64])(nb), nil
	case kindFloat32:
		return makeCodec(nb,
			func(v value) float32 { return float32(math.Float64frombits(v.n)) },
			func(x float32) (value, error) { return floatValue(float64(x)), nil }), nil
	case kindFloat64:
		return makeCodec(nb,
			func(v value) float64 { return math.Float64frombits(v.n) },
			func(x float64) (value, error) { return floatValue(x), nil }), nil
	case kindDecimal:
		return makeCodec(nb,
			func(v value) decimal.Decimal {
				n, _ := new(big.Int).SetString(v.s, 10)
				if n == nil {
					n = new(big.Int)
				}
				return decimal.NewFromBigInt(n, int32(-t.scale))
			},
			func(x decimal.Decimal) (value, error) {
				n, err := rescale(x.Coefficient(), int64(x.Exponent()), t)
				if err != nil {
					return value{}, err
				}
				return value{s: n.String()}, nil
			}), nil
	case kindString:
		return makeCodec(nb,
			func(v value) string { return v.s },
			func(x string) (value, error) { return value{s: x}, nil }), nil
	case kindBool:
		if asUInt8 {
			return makeCodec(nb,
				func(v value) uint8 { return uint8(v.n) },
				func(x uint8) (value, error) {
					if x > 1 {
						return value{}, fmt.Errorf("a Bool column stored as UInt8 holds %d", x)
					}
					return value{n: uint64(x)}, nil
				}), nil
		}
		return makeCodec(nb,
			func(v value) bool { return v.n != 0 },
			func(x bool) (value, error) {
				if x {
					return value{n: 1}, nil
				}
				return value{}, nil
			}), nil
	case kindDate:
		return makeCodec(nb,
			func(v value) time.Time { return time.Unix(int64(v.n)*86400, 0).UTC() },
			func(x time.Time) (value, error) {
				days := time.Date(x.Year(), x.Month(), x.Day(), 0, 0, 0, 0, time.UTC).Unix() / 86400
				return value{n: uint64(days)}, nil
			}), nil
	case kindDateTime, kindDateTime64:
		// Seconds (DateTime) or ticks (DateTime64) as int64, exact both ways.
		return makeCodec(nb,
			func(v value) int64 { return int64(v.n) },
			func(x int64) (value, error) { return value{n: uint64(x)}, nil }), nil
	case kindUUID:
		return makeCodec(nb,
			func(v value) uuid.UUID {
				var u uuid.UUID
				copy(u[:], v.s)
				return u
			},
			func(x uuid.UUID) (value, error) { return value{s: string(x[:])}, nil }), nil
	}
	return codec{}, fmt.Errorf("no codec for column %q", c.name)
}
