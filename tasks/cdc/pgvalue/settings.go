package pgvalue

import (
	"fmt"
	"strconv"
	"strings"
)

// Settings returns the settings the replication connection must run
// under, to be sent as its startup parameters (pgconn.Config.RuntimeParams).
// pgoutput prints each value with its type's output function in the
// walsender, under the walsender's settings: postgresql.conf's, then ALTER
// ROLE/DATABASE … SET (a database set to DateStyle 'SQL, DMY' streams a
// date as 04/03/1890), then the startup parameters, which win
// (TestWalsenderSettings shows each). Under these, every value reads back
// exactly: dates and times in ISO form, floats in their shortest exact
// text, bytea in hex, text in UTF-8. TimeZone UTC is for readability only:
// a timestamptz is printed with its offset, which is read whatever it is.
func Settings() map[string]string {
	return map[string]string{
		"DateStyle":          "ISO, MDY",
		"IntervalStyle":      "postgres",
		"TimeZone":           "UTC",
		"extra_float_digits": "3",
		"bytea_output":       "hex",
		"client_encoding":    "UTF8",
	}
}

// CheckedSettings are the settings CheckSettings needs: on a replication
// connection, read each with SHOW (a replication command since PostgreSQL
// 10).
var CheckedSettings = []string{"DateStyle", "IntervalStyle", "extra_float_digits", "bytea_output", "client_encoding"}

// CheckSettings refuses (ErrSettings) settings of the replication
// connection, as SHOW reads them (got: name → value), under which a value's
// text would not read back exactly or as this package reads it: DateStyle
// other than ISO, IntervalStyle other than postgres (an interval held as
// String would change its text), extra_float_digits below 1 (floats
// rounded to 15 or fewer digits), bytea_output escape, client_encoding
// other than UTF8; and a setting not given.
func CheckSettings(got map[string]string) error {
	for _, name := range CheckedSettings {
		v, ok := got[name]
		if !ok {
			return fmt.Errorf("%w: %s was not read", ErrSettings, name)
		}
		var good bool
		switch name {
		case "DateStyle":
			style, _, _ := strings.Cut(v, ",")
			good = strings.EqualFold(strings.TrimSpace(style), "ISO")
		case "IntervalStyle":
			good = v == "postgres"
		case "extra_float_digits":
			n, err := strconv.Atoi(v)
			good = err == nil && n >= 1
		case "bytea_output":
			good = v == "hex"
		case "client_encoding":
			good = strings.EqualFold(v, "UTF8") || strings.EqualFold(v, "UTF-8")
		}
		if !good {
			return fmt.Errorf("%w: %s is %q; changesink needs %s", ErrSettings, name, v, Settings()[name])
		}
	}
	return nil
}
