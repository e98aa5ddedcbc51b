package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strconv"
	"strings"

	"kvd/tenant"
)

// Strict decoding. encoding/json's DisallowUnknownFields reports an
// unknown key without saying where it is, and encoding/json matches keys
// case-insensitively ("Node_Capacity" would set node_capacity). So each
// level of the file (top, ingress, ingress.probe, each bucket, each user)
// is decoded on its own, with the path of that level:
//
//  1. checkKeys walks the level's keys in order and rejects any that is
//     not exactly a field name, and any given twice;
//  2. a json.Decoder with DisallowUnknownFields decodes the level. Its
//     nested parts are captured as json.RawMessage by a wrapper struct that
//     embeds the real type (as embeddedName) and shadows the nested field
//     with one of the same JSON name, then decoded the same way with a
//     longer path.
//
// Decoding happens over the values already in the destination, which is
// how absent fields keep their defaults.

// embeddedName is the Go name of the embedded real type in the wrappers;
// encoding/json puts it in error paths, and decodeError removes it.
const embeddedName = "base"

// decodeFile decodes data over f.
func decodeFile(data []byte, f *File) error {
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) == 0 {
		return fmt.Errorf("%w: empty input, want a JSON object", ErrSyntax)
	}
	if trimmed[0] != '{' {
		return fmt.Errorf("%w: want a JSON object, got %s", ErrSyntax, tenant.DescribeJSON(trimmed))
	}
	type base File // the embedded real type; its name is embeddedName
	w := struct {
		*base
		Ingress json.RawMessage   `json:"ingress"`
		Buckets []json.RawMessage `json:"buckets"`
		Users   []json.RawMessage `json:"users"`
	}{base: (*base)(f)}
	if err := decodeLevel(data, "", &w, true); err != nil {
		return err
	}
	if err := decodeIngress(w.Ingress, &f.Ingress); err != nil {
		return err
	}
	if w.Buckets != nil {
		f.Buckets = make([]Bucket, len(w.Buckets))
		for i, raw := range w.Buckets {
			if err := decodeLevel(raw, fmt.Sprintf("buckets[%d]", i), &f.Buckets[i], false); err != nil {
				return err
			}
		}
	}
	if w.Users != nil {
		f.Users = make([]User, len(w.Users))
		for i, raw := range w.Users {
			if err := decodeLevel(raw, fmt.Sprintf("users[%d]", i), &f.Users[i], false); err != nil {
				return err
			}
		}
	}
	return nil
}

// decodeIngress decodes the "ingress" object (if present) over in.
func decodeIngress(raw json.RawMessage, in *Ingress) error {
	if raw == nil {
		return nil
	}
	type base Ingress
	w := struct {
		*base
		Probe json.RawMessage `json:"probe"`
	}{base: (*base)(in)}
	if err := decodeLevel(raw, "ingress", &w, false); err != nil {
		return err
	}
	if w.Probe == nil {
		return nil
	}
	return decodeLevel(w.Probe, "ingress.probe", &in.Probe, false)
}

// decodeLevel decodes one JSON value over dst, refusing unknown keys, and
// reports errors with path (the level's place in the file, "" for the
// top). Only the top level can hold trailing data or bad syntax: nested
// levels arrive as json.RawMessage, already checked by the level above.
func decodeLevel(data []byte, path string, dst any, top bool) error {
	if err := checkKeys(data, path, fieldNames(reflect.TypeOf(dst))); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		return decodeError(err, data, path)
	}
	if top {
		if _, err := dec.Token(); err != io.EOF {
			return fmt.Errorf("%w: unexpected data after the top-level object at %s",
				ErrSyntax, position(data, dec.InputOffset()-1))
		}
	}
	return nil
}

// decodeError translates an encoding/json error into one of this
// package's, naming the field by its full path.
func decodeError(err error, data []byte, path string) error {
	var te *json.UnmarshalTypeError
	var se *json.SyntaxError
	switch {
	case errors.As(err, &te):
		field := joinPath(path, strings.TrimPrefix(te.Field, embeddedName+"."))
		if field == "" {
			return fmt.Errorf("%w: got %s, want %s", ErrType, te.Value, typeWant(te.Type))
		}
		return fmt.Errorf("%w for field %q: got %s, want %s", ErrType, field, te.Value, typeWant(te.Type))
	case errors.As(err, &se):
		return fmt.Errorf("%w at %s: %s", ErrSyntax, position(data, se.Offset-1),
			strings.TrimPrefix(se.Error(), "json: "))
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return fmt.Errorf("%w: unexpected end of input", ErrSyntax)
	}
	if q, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		if name, uerr := strconv.Unquote(q); uerr == nil {
			return fmt.Errorf("%w %q", ErrUnknownField, joinPath(path, name))
		}
	}
	return fmt.Errorf("config: %s: %w", displayPath(path), err)
}

// checkKeys rejects a key of the object in data that is not exactly one
// of names, or that appears twice, naming it by its full path. It leaves
// everything else (a value that is not an object, bad syntax, wrong types)
// to the typed decoding that follows.
func checkKeys(data []byte, path string, names map[string]bool) error {
	key, dup, ok := tenant.CheckObjectKeys(data, names)
	switch {
	case ok:
		return nil
	case dup:
		return fmt.Errorf("%w %q", ErrDuplicateField, joinPath(path, key))
	}
	return fmt.Errorf("%w %q", ErrUnknownField, joinPath(path, key))
}

// fieldNames returns the JSON names of t's fields (t a struct or a pointer
// to one), including those of embedded structs.
func fieldNames(t reflect.Type) map[string]bool {
	names := map[string]bool{}
	var walk func(t reflect.Type)
	walk = func(t reflect.Type) {
		for t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		if t.Kind() != reflect.Struct {
			return
		}
		for i := 0; i < t.NumField(); i++ {
			sf := t.Field(i)
			name, _, _ := strings.Cut(sf.Tag.Get("json"), ",")
			switch {
			case sf.Anonymous && name == "":
				walk(sf.Type)
			case name != "" && name != "-":
				names[name] = true
			}
		}
	}
	walk(t)
	return names
}

// joinPath appends a dotted field path to a level's path.
func joinPath(path, field string) string {
	switch {
	case path == "":
		return field
	case field == "":
		return path
	}
	return path + "." + field
}

func displayPath(path string) string {
	if path == "" {
		return "top level"
	}
	return path
}

// position gives the place of the byte at offset as "line L, column C"
// (1-based).
func position(data []byte, offset int64) string {
	offset = min(max(offset, 0), int64(len(data)))
	before := data[:offset]
	line := bytes.Count(before, []byte("\n")) + 1
	col := len(before) - bytes.LastIndexByte(before, '\n')
	return fmt.Sprintf("line %d, column %d", line, col)
}

// typeWant describes in words what a Go field accepts.
func typeWant(t reflect.Type) string {
	if w := tenant.LimitTypeWant(t); w != "" {
		return w
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Bool:
		return "true or false"
	case reflect.String:
		return "a string"
	case reflect.Slice:
		if t.Elem().Kind() == reflect.String {
			return "an array of strings"
		}
		return "an array"
	case reflect.Struct:
		return "an object"
	}
	return t.String()
}
