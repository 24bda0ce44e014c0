package cdc

import (
	"errors"

	"github.com/changesink/changesink/tasks/cdc/change"
	"github.com/changesink/changesink/tasks/cdc/mapping"
)

// The refusals, transient failures and configuration errors of setup and
// apply, declared by the layers that raise them (change, mapping) and
// named here so that callers test them with errors.Is on this package.
var (
	ErrEmptyBatch        = change.ErrEmptyBatch
	ErrMalformed         = change.ErrMalformed
	ErrNotStruct         = change.ErrNotStruct
	ErrSourceChanged     = change.ErrSourceChanged
	ErrWrongSource       = change.ErrWrongSource
	ErrMissingField      = change.ErrMissingField
	ErrBadLSN            = change.ErrBadLSN
	ErrBadTxID           = change.ErrBadTxID
	ErrBadDeleteMarker   = change.ErrBadDeleteMarker
	ErrBadValue          = change.ErrBadValue
	ErrToast             = change.ErrToast
	ErrContradiction     = change.ErrContradiction
	ErrWentBackwards     = change.ErrWentBackwards
	ErrKeyChange         = change.ErrKeyChange
	ErrConflict          = change.ErrConflict
	ErrTargetConflict    = change.ErrTargetConflict
	ErrVerify            = change.ErrVerify
	ErrTargetLocked      = change.ErrTargetLocked
	ErrTargetMismatch    = change.ErrTargetMismatch
	ErrNoDatabase        = change.ErrNoDatabase
	ErrUnsupportedServer = change.ErrUnsupportedServer
	ErrConfig            = change.ErrConfig
	ErrMapping           = mapping.ErrMapping
)

// RecordError locates a refusal in the batch (see change.RecordError);
// MappingError a mistake in the mapping file.
type (
	RecordError  = change.RecordError
	MappingError = mapping.MappingError
)

// Transient failures after the batch is applied, verified and recorded:
// only the lock or the task's output files are left to do.
var (
	errNotReleased  = errors.New("the batch is applied, verified and recorded in the ledger, but giving back the lock failed")
	errNotPublished = errors.New("the batch is applied, verified and recorded in the ledger, but the output files are not published")
	// errOutputFiles: an output file could not be written before the
	// insert (a full disk); nothing was written to ClickHouse.
	errOutputFiles = errors.New("the working directory cannot take the output files")
)
