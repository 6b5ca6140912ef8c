package server

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/shardsplit/shardsplit/service"
)

// decodeQueryString decodes a raw query string as OpenSearch's
// RestUtils.decodeQueryString does: pairs separated by '&' or ';', the
// first '=' splits name from value, a name without '=' has an empty value,
// a repeated name keeps its last value, and each part is decoded by
// decodeComponent. Go's url.ParseQuery differs (it refuses ';' and "%%"),
// and url.URL.Query drops what it cannot decode without a word, so a
// routing value with a bad escape silently became no routing.
func decodeQueryString(raw string) (url.Values, error) {
	out := url.Values{}
	if i := strings.IndexByte(raw, '#'); i >= 0 {
		raw = raw[:i]
	}
	for _, pair := range strings.FieldsFunc(raw, func(c rune) bool { return c == '&' || c == ';' }) {
		rawName, rawValue, _ := strings.Cut(pair, "=")
		if rawName == "" {
			rawName, rawValue = rawValue, "" // "=v" is the parameter v, as OpenSearch reads it
		}
		name, err := decodeComponent(rawName)
		if err != nil {
			return nil, err
		}
		value, err := decodeComponent(rawValue)
		if err != nil {
			return nil, err
		}
		out.Set(name, value)
	}
	return out, nil
}

// decodeComponent is RestUtils.decodeComponent with '+' as a space: "%%"
// is '%', "%hh" a byte, and a malformed escape is an error with
// OpenSearch's message.
func decodeComponent(s string) (string, error) {
	if !strings.ContainsAny(s, "%+") {
		return s, nil
	}
	buf := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch c {
		case '+':
			buf = append(buf, ' ')
		case '%':
			if i == len(s)-1 {
				return "", fmt.Errorf("unterminated escape sequence at end of string: %s", s)
			}
			i++
			if s[i] == '%' {
				buf = append(buf, '%')
				continue
			}
			if i == len(s)-1 {
				return "", fmt.Errorf("partial escape sequence at end of string: %s", s)
			}
			hi, lo := unhex(s[i]), unhex(s[i+1])
			i++
			if hi < 0 || lo < 0 {
				return "", fmt.Errorf("invalid escape sequence `%%%c%c' at index %d of: %s", s[i-1], s[i], i-2, s)
			}
			buf = append(buf, byte(hi<<4|lo))
		default:
			buf = append(buf, c)
		}
	}
	return string(buf), nil
}

func unhex(c byte) int {
	switch {
	case '0' <= c && c <= '9':
		return int(c - '0')
	case 'a' <= c && c <= 'f':
		return int(c-'a') + 10
	case 'A' <= c && c <= 'F':
		return int(c-'A') + 10
	}
	return -1
}

// badParameter is OpenSearch's answer to a query string it cannot decode
// (RestRequest.BadParameterException wrapping the IllegalArgumentException).
func badParameter(err error) *service.Error {
	return &service.Error{Type: "bad_parameter_exception", Status: http.StatusBadRequest,
		Reason: "java.lang.IllegalArgumentException: " + err.Error()}
}

// query returns the request's decoded query parameters (ServeHTTP has
// refused a query string that does not decode).
func query(r *http.Request) url.Values {
	q, err := decodeQueryString(r.URL.RawQuery)
	if err != nil {
		return url.Values{}
	}
	return q
}
