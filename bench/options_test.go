package bench

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestParseBucketSpec(t *testing.T) {
	def := BucketSpec{Conns: 4, Pipeline: 1, GetWeight: 90, SetWeight: 10, ValueSize: 100, Keys: 10000}
	with := func(f func(*BucketSpec)) BucketSpec {
		b := def
		f(&b)
		return b
	}
	tests := []struct {
		in   string
		want BucketSpec
	}{
		{"app", with(func(b *BucketSpec) { b.Name = "app" })},
		{"app:8", with(func(b *BucketSpec) { b.Name, b.Conns = "app", 8 })},
		{"app:8:5000", with(func(b *BucketSpec) { b.Name, b.Conns, b.Rate = "app", 8, 5000 })},
		{"app:1:0.5", with(func(b *BucketSpec) { b.Name, b.Conns, b.Rate = "app", 1, 0.5 })},
		{"app:2,user=app,password=app-secret", with(func(b *BucketSpec) {
			b.Name, b.Conns, b.User, b.Password = "app", 2, "app", "app-secret"
		})},
		{"b,pipeline=16,mix=50:50,value=4096,keys=7", with(func(b *BucketSpec) {
			b.Name, b.Pipeline, b.GetWeight, b.SetWeight, b.ValueSize, b.Keys = "b", 16, 50, 50, 4096, 7
		})},
		{"w,mix=0:1", with(func(b *BucketSpec) { b.Name, b.GetWeight, b.SetWeight = "w", 0, 1 })},
		{"r,mix=1:0", with(func(b *BucketSpec) { b.Name, b.GetWeight, b.SetWeight = "r", 1, 0 })},
		{"p,user=u,password=a=b:c", with(func(b *BucketSpec) { b.Name, b.User, b.Password = "p", "u", "a=b:c" })},
	}
	for _, tt := range tests {
		got, err := ParseBucketSpec(tt.in)
		if err != nil {
			t.Errorf("ParseBucketSpec(%q): %v", tt.in, err)
			continue
		}
		if got != tt.want {
			t.Errorf("ParseBucketSpec(%q) = %+v, want %+v", tt.in, got, tt.want)
		}
	}
}

func TestParseBucketSpecErrors(t *testing.T) {
	tests := []struct{ in, wantMsg string }{
		{"", "name"},
		{":4", "name"},
		{"a b", "name"},
		{"a:x", "conns"},
		{"a:0", "conns"},
		{"a:-1", "conns"},
		{"a:1:fast", "rate"},
		{"a:1:-5", "rate"},
		{"a:1:NaN", "rate"},
		{"a:1:+Inf", "rate"},
		{"a:1:2:3", "name[:conns[:rate]]"},
		{"a,pipeline=0", "pipeline"},
		{"a,pipeline=100000", "pipeline"},
		{"a,mix=90", "mix"},
		{"a,mix=0:0", "mix"},
		{"a,mix=-1:3", "mix"},
		{"a,value=0", "value"},
		{"a,value=999999999", "value"},
		{"a,keys=0", "keys"},
		{"a,password=p", "password without user"},
		{"a,color=red", "unknown option"},
		{"a,user", "key=value"},
		{"a,", "key=value"},
		{"a:100000", "conns"},
		{strings.Repeat("n", 201), "name"},
	}
	for _, tt := range tests {
		_, err := ParseBucketSpec(tt.in)
		if err == nil {
			t.Errorf("ParseBucketSpec(%q) succeeded, want an error about %q", tt.in, tt.wantMsg)
			continue
		}
		if !errors.Is(err, ErrBadSpec) || !strings.Contains(err.Error(), tt.wantMsg) {
			t.Errorf("ParseBucketSpec(%q) = %v, want ErrBadSpec mentioning %q", tt.in, err, tt.wantMsg)
		}
	}
}

func TestOptionsDefaults(t *testing.T) {
	o := DefaultOptions()
	if o.Addr != DefaultAddr || o.Duration != 10*time.Second || o.Warmup != time.Second {
		t.Errorf("DefaultOptions = %+v", o)
	}
	if len(o.Buckets) != 1 || o.Buckets[0].Name != AnonymousName || !o.Anonymous {
		t.Errorf("DefaultOptions buckets = %+v, anonymous %v; want one anonymous tenant", o.Buckets, o.Anonymous)
	}
	if b := o.Buckets[0]; b.Conns != 4 || b.Rate != 0 || b.Pipeline != 1 || b.GetWeight != 90 ||
		b.SetWeight != 10 || b.ValueSize != 100 || b.Keys != 10000 {
		t.Errorf("default bucket = %+v", b)
	}
	if err := o.Validate(); err != nil {
		t.Errorf("DefaultOptions().Validate() = %v", err)
	}
	// Explicit buckets keep selection on.
	o = Options{Buckets: []BucketSpec{{Name: "app"}}}
	o.EnsureDefaults()
	if o.Anonymous || o.Buckets[0].Conns != DefaultConns || o.Warmup != 0 {
		t.Errorf("EnsureDefaults with a bucket = %+v", o)
	}
}

func TestOptionsValidate(t *testing.T) {
	tests := []struct {
		name string
		mod  func(*Options)
		want string
	}{
		{"duplicate bucket", func(o *Options) { o.Buckets = append(o.Buckets, o.Buckets[0]) }, "twice"},
		{"negative warmup", func(o *Options) { o.Warmup = -time.Second }, "warmup"},
		{"negative duration", func(o *Options) { o.Duration = -time.Second }, "duration"},
		{"zero read unit", func(o *Options) { o.ReadUnitSize = -1 }, "unit sizes"},
		{"bad bucket", func(o *Options) { o.Buckets[0].Pipeline = -3 }, "pipeline"},
	}
	for _, tt := range tests {
		o := Options{Buckets: []BucketSpec{{Name: "a"}}}
		o.EnsureDefaults()
		tt.mod(&o)
		err := o.Validate()
		if !errors.Is(err, ErrBadSpec) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: Validate() = %v, want ErrBadSpec mentioning %q", tt.name, err, tt.want)
		}
	}
}
