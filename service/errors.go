package service

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/shardsplit/shardsplit/baseline"
	"github.com/shardsplit/shardsplit/node"
	"github.com/shardsplit/shardsplit/routing"
)

// Error is a failure as OpenSearch reports it: an exception type in
// snake_case, a reason, an HTTP status, and the index it concerns. The HTTP
// layer writes it as OpenSearch's error body.
type Error struct {
	Type   string
	Reason string
	Status int
	Index  string // "" if none
	UUID   string // the index's uuid, "" if unknown
	// Extra holds further fields OpenSearch puts in the error object
	// (e.g. "resource.type").
	Extra map[string]string
	cause error
}

func (e *Error) Error() string { return e.Type + ": " + e.Reason }

// Unwrap returns the error this one was made from.
func (e *Error) Unwrap() error { return e.cause }

func newErr(typ string, status int, index, format string, args ...any) *Error {
	return &Error{Type: typ, Status: status, Index: index, Reason: fmt.Sprintf(format, args...)}
}

// Exception types used here.
const (
	TypeIllegalArgument      = "illegal_argument_exception"
	TypeIllegalState         = "illegal_state_exception"
	TypeIndexNotFound        = "index_not_found_exception"
	TypeAlreadyExists        = "resource_already_exists_exception"
	TypeInvalidIndexName     = "invalid_index_name_exception"
	TypeInvalidAliasName     = "invalid_alias_name_exception"
	TypeClusterBlock         = "cluster_block_exception"
	TypeValidation           = "action_request_validation_exception"
	TypeValidationException  = "validation_exception" // org.opensearch.common.ValidationException
	TypeVersionConflict      = "version_conflict_engine_exception"
	TypeParse                = "parse_exception"
	TypeShardNotFound        = "shard_not_found_exception"
	TypeResourceNotFound     = "resource_not_found_exception"
	TypeTaskCancelled        = "task_cancelled_exception"
	TypeUnsupportedOperation = "unsupported_operation_exception"
	TypeRoutingMissing       = "routing_missing_exception"
	TypeException            = "exception"
)

// aliasNamesIndex is OpenSearch's refusal of an alias named like an index
// (AliasValidator).
func aliasNamesIndex(alias string) *Error {
	return newErr(TypeInvalidAliasName, http.StatusBadRequest, alias,
		"Invalid alias name [%s]: an index or data stream exists with the same name as the alias", alias)
}

func indexNotFound(name string) *Error {
	e := newErr(TypeIndexNotFound, http.StatusNotFound, name, "no such index [%s]", name)
	e.UUID = "_na_"
	e.Extra = map[string]string{"resource.type": "index_or_alias", "resource.id": name}
	return e
}

// noIndicesExist is OpenSearch's IndexNotFoundException for an expression
// (_all) that names every index when there is none and the request does
// not allow no indices: it names no index.
func noIndicesExist(expr string) *Error {
	e := newErr(TypeIndexNotFound, http.StatusNotFound, "", "no such index [null] and no indices exist")
	e.Extra = map[string]string{"resource.type": "index_expression", "resource.id": expr}
	return e
}

// noSuchIndexExpression is OpenSearch's IndexNotFoundException for an
// expression that resolved to no index where the request does not allow
// none: index is the name it reports ("null" when it names none), expr
// the request's expression. (OpenSearch lists several expressions in
// resource.id as an array; here they stay one comma-separated string.)
func noSuchIndexExpression(index, expr string) *Error {
	e := newErr(TypeIndexNotFound, http.StatusNotFound, "", "no such index [%s]", index)
	if index != "null" {
		e.Index, e.UUID = index, "_na_"
	}
	e.Extra = map[string]string{"resource.type": "index_expression", "resource.id": expr}
	return e
}

// routingTypes maps routing's Java exception classes to OpenSearch's REST
// types and statuses.
var routingTypes = map[routing.Exception]struct {
	typ    string
	status int
}{
	routing.IllegalArgument:       {TypeIllegalArgument, http.StatusBadRequest},
	routing.IllegalState:          {TypeIllegalState, http.StatusInternalServerError},
	routing.ResourceAlreadyExists: {TypeAlreadyExists, http.StatusBadRequest},
	routing.IndexNotFound:         {TypeIndexNotFound, http.StatusNotFound},
	routing.ShardNotFound:         {TypeShardNotFound, http.StatusNotFound},
	routing.Arithmetic:            {"arithmetic_exception", http.StatusInternalServerError},
	routing.Assertion:             {"assertion_error", http.StatusInternalServerError},
	routing.IndexOutOfBounds:      {"array_index_out_of_bounds_exception", http.StatusInternalServerError},
	// A NumberFormatException is an IllegalArgumentException: 400.
	routing.NumberFormat: {"number_format_exception", http.StatusBadRequest},
}

// AsError converts any error to an *Error: our own, routing's OpenSearch
// rule violations, write blocks, and anything else as a 500 "exception".
func AsError(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	var re *routing.Error
	if errors.As(err, &re) {
		m, ok := routingTypes[re.Exception]
		if !ok {
			m.typ, m.status = TypeException, http.StatusInternalServerError
		}
		return &Error{Type: m.typ, Status: m.status, Reason: re.Message, cause: err}
	}
	var sb *BlockError
	if errors.As(err, &sb) {
		status := http.StatusForbidden
		if sb.Status != 0 {
			status = sb.Status
		}
		return &Error{Type: TypeClusterBlock, Status: status, Reason: sb.Error(), cause: err}
	}
	var be *baseline.BlockError
	if errors.As(err, &be) {
		return &Error{Type: TypeClusterBlock, Status: http.StatusForbidden, Reason: be.Error(), Index: be.Index, cause: err}
	}
	if errors.Is(err, node.ErrClosed) {
		return &Error{Type: TypeIndexNotFound, Status: http.StatusNotFound, Reason: "index closed or deleted during the request", cause: err}
	}
	return &Error{Type: TypeException, Status: http.StatusInternalServerError, Reason: err.Error(), cause: err}
}
