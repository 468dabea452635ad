package adapt

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/lockmw/lockmw/lockmw"
)

func TestParseTemplateAccepts(t *testing.T) {
	for _, tc := range []struct{ tmpl, key string }{
		{"order:{id}", "order:42"},
		{"{id}", "42"},
		{"{x}/stock", "42/stock"},
		{"shop:{item}:v1", "shop:42:v1"},
		{"a b:{the id}", "a b:42"},
		{"ünï:{ïd}", "ünï:42"},
	} {
		tmpl, err := ParseTemplate(tc.tmpl)
		if err != nil {
			t.Errorf("ParseTemplate(%q): %v", tc.tmpl, err)
			continue
		}
		if got := tmpl.Key("42"); got != tc.key {
			t.Errorf("ParseTemplate(%q).Key(42) = %q, want %q", tc.tmpl, got, tc.key)
		}
		if tmpl.String() != tc.tmpl || tmpl.IsZero() {
			t.Errorf("ParseTemplate(%q): String %q, IsZero %v", tc.tmpl, tmpl.String(), tmpl.IsZero())
		}
	}
}

func TestParseTemplateRejects(t *testing.T) {
	for _, tmpl := range []string{
		"",              // no placeholder
		"order",         // no placeholder
		"order:{}",      // empty name
		"x{}y",          // empty name
		"{}",            // empty name
		"{a}:{b}",       // two placeholders
		"{a}{b}",        // two placeholders
		"order:{{id}}",  // nested braces
		"order:{id",     // unclosed
		"order:id}",     // unopened
		"order:}id{",    // reversed
		"}{id}",         // stray brace before
		"{id}}",         // stray brace after
		"{i{d}",         // brace in the name
		"order:{id}:{}", // a second, empty placeholder
	} {
		_, err := ParseTemplate(tmpl)
		if !errors.Is(err, ErrBadTemplate) || !strings.Contains(err.Error(), "placeholder") {
			t.Errorf("ParseTemplate(%q) = %v, want an error matching ErrBadTemplate about the placeholder", tmpl, err)
		}
	}
}

func TestZeroTemplate(t *testing.T) {
	var tmpl Template
	if !tmpl.IsZero() || tmpl.Key("42") != "42" || tmpl.String() != "" {
		t.Errorf("zero Template: IsZero %v, Key %q, String %q; want the identifier as it is", tmpl.IsZero(), tmpl.Key("42"), tmpl.String())
	}
}

func TestAcquireOutcome(t *testing.T) {
	live := t.Context()
	ended, cancel := context.WithCancel(t.Context())
	cancel()
	for _, tc := range []struct {
		name string
		ctx  context.Context
		err  error
		want string
	}{
		{"acquired", live, nil, OutcomeAcquired},
		{"busy", live, fmt.Errorf("acquire: %w", lockmw.ErrNotAcquired), OutcomeBusy},
		{"invalid key", live, fmt.Errorf("acquire: %w", lockmw.ErrInvalidKey), OutcomeInvalid},
		{"cancelled", ended, fmt.Errorf("acquire: %w", context.Canceled), OutcomeTimeout},
		{"deadline", live, fmt.Errorf("acquire: %w", context.DeadlineExceeded), OutcomeTimeout},
		{"ended, store cut off", ended, fmt.Errorf("acquire: %w", lockmw.ErrUnavailable), OutcomeTimeout},
		{"unavailable", live, fmt.Errorf("acquire: %w", lockmw.ErrUnavailable), OutcomeError},
		{"unavailable, store timed out", live, fmt.Errorf("%w: %w", lockmw.ErrUnavailable, context.DeadlineExceeded), OutcomeError},
		{"closed", live, lockmw.ErrClosed, OutcomeError},
		{"other", live, errors.New("boom"), OutcomeError},
	} {
		if got := AcquireOutcome(tc.ctx, tc.err); got != tc.want {
			t.Errorf("%s: AcquireOutcome = %q, want %q", tc.name, got, tc.want)
		}
	}
}

type option interface{ apply(*[]string) }

type optionFunc func(*[]string)

func (f optionFunc) apply(s *[]string) { f(s) }

func TestApplySkipsNil(t *testing.T) {
	add := func(v string) option { return optionFunc(func(s *[]string) { *s = append(*s, v) }) }
	var got []string
	Apply([]option{nil, add("a"), nil, add("b"), nil}, func(o option) { o.apply(&got) })
	if strings.Join(got, ",") != "a,b" {
		t.Errorf("applied %v, want [a b]", got)
	}
}

func TestMisuse(t *testing.T) {
	var m Misuse
	if m.Err() != nil {
		t.Fatal("a zero Misuse reports a mistake")
	}
	m.Addf("x.WithWait(-1s)", "the wait must not be %s", "negative")
	_, perr := ParseTemplate("order")
	m.Add(`x.WithName("order")`, perr)
	err := m.Err()
	if !errors.Is(err, lockmw.ErrInvalidOption) || !errors.Is(err, ErrBadTemplate) {
		t.Errorf("Err() = %v, want it to match ErrInvalidOption and ErrBadTemplate", err)
	}
	for _, want := range []string{"x.WithWait(-1s): the wait must not be negative", `x.WithName("order")`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Err() = %q, want it to name %q", err, want)
		}
	}
}

func TestMustSetup(t *testing.T) {
	MustSetup("x.New", false, false, nil) // no mistake: no panic
	var m Misuse
	m.Addf("x.WithWait(-1s)", "negative")
	for _, tc := range []struct {
		name              string
		nilLocker, nilKey bool
		err               error
		want              string
	}{
		{"nil locker", true, false, nil, "x.New: nil *lockmw.Locker"},
		{"nil key", false, true, nil, "x.New: nil KeyFunc"},
		{"options", false, false, m.Err(), "x.WithWait(-1s)"},
	} {
		func() {
			defer func() {
				if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), tc.want) {
					t.Errorf("%s: panic %v, want one saying %q", tc.name, r, tc.want)
				}
			}()
			MustSetup("x.New", tc.nilLocker, tc.nilKey, tc.err)
		}()
	}
}

func TestInstruments(t *testing.T) {
	tracer, meter := Instruments("x", nil, nil) // the global providers
	if tracer == nil || meter == nil {
		t.Fatal("no tracer or meter from the global providers")
	}
	if c := Counter(meter, "x.calls", "{call}", "Calls."); c == nil {
		t.Fatal("no counter")
	}
	sdk := sdkmetric.NewMeterProvider()
	defer func() { _ = sdk.Shutdown(t.Context()) }()
	if c := Counter(sdk.Meter("x"), "9 is no instrument name", "{call}", "Refused."); c == nil {
		t.Fatal("no counter for a refused name: want a no-op one")
	} else {
		c.Add(t.Context(), 1) // must not panic
	}
}
