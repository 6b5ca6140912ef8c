package routing

import (
	"errors"
	"fmt"
)

// Exception names the Java exception class OpenSearch throws for a rule this
// package reproduces. Callers branch on it with errors.As on *Error; tests
// compare it with the class recorded in OpenSearch's own test vectors.
type Exception uint8

const (
	// IllegalArgument is java.lang.IllegalArgumentException.
	IllegalArgument Exception = iota + 1
	// IllegalState is java.lang.IllegalStateException.
	IllegalState
	// ResourceAlreadyExists is OpenSearch's ResourceAlreadyExistsException.
	ResourceAlreadyExists
	// IndexNotFound is OpenSearch's IndexNotFoundException.
	IndexNotFound
	// ShardNotFound is OpenSearch's ShardNotFoundException.
	ShardNotFound
	// Arithmetic is java.lang.ArithmeticException (a split into 0 children).
	Arithmetic
	// Assertion is java.lang.AssertionError: a precondition OpenSearch only
	// checks with Java assertions enabled. We always check it.
	Assertion
	// IndexOutOfBounds is java.lang.ArrayIndexOutOfBoundsException.
	IndexOutOfBounds
	// NumberFormat is java.lang.NumberFormatException (Integer.parseInt of
	// a _shards preference id).
	NumberFormat
)

var exceptionNames = [...]string{
	IllegalArgument:       "IllegalArgumentException",
	IllegalState:          "IllegalStateException",
	ResourceAlreadyExists: "ResourceAlreadyExistsException",
	IndexNotFound:         "IndexNotFoundException",
	ShardNotFound:         "ShardNotFoundException",
	Arithmetic:            "ArithmeticException",
	Assertion:             "AssertionError",
	IndexOutOfBounds:      "ArrayIndexOutOfBoundsException",
	NumberFormat:          "NumberFormatException",
}

// String returns the Java class name, e.g. "IllegalArgumentException".
func (e Exception) String() string {
	if int(e) < len(exceptionNames) && exceptionNames[e] != "" {
		return exceptionNames[e]
	}
	return fmt.Sprintf("Exception(%d)", uint8(e))
}

// Error is a rule violation with OpenSearch's exception class and its exact
// message text. The message is OpenSearch's verbatim (typos included, e.g.
// "less that"), so that users can compare our output with a real cluster;
// that is why it carries no "routing:" prefix.
type Error struct {
	Exception Exception
	Message   string
}

func (e *Error) Error() string { return e.Message }

func newError(ex Exception, format string, args ...any) *Error {
	return &Error{Exception: ex, Message: fmt.Sprintf(format, args...)}
}

// ExceptionOf returns the exception class of err, or 0 if err carries none.
func ExceptionOf(err error) Exception {
	var e *Error
	if errors.As(err, &e) {
		return e.Exception
	}
	return 0
}

// ErrCorruptTable marks a routing table encoding that failed its magic,
// version, length or checksum check, or whose content does not form a
// valid table (Validate). Decode wraps it with the detail.
var ErrCorruptTable = errors.New("routing: corrupt table encoding")
