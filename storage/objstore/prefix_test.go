package objstore

import (
	"slices"
	"testing"
)

func TestPrefixBucket(t *testing.T) {
	ctx := t.Context()
	inner := NewMemoryBucket()
	PutBytes(ctx, inner, "outside", []byte("o"), PutOptions{})
	PutBytes(ctx, inner, "tenant/onex", []byte("o"), PutOptions{}) // shares the string prefix, not the directory
	p, err := NewPrefixBucket(inner, "/tenant/one/")
	if err != nil {
		t.Fatal(err)
	}
	if p.Prefix() != "tenant/one/" {
		t.Fatalf("prefix %q", p.Prefix())
	}
	a, err := PutBytes(ctx, p, "a/b", []byte("v"), PutOptions{IfAbsent: true})
	if err != nil || a.Name != "a/b" {
		t.Fatalf("put = %+v, %v", a, err)
	}
	PutBytes(ctx, p, "c", []byte("v"), PutOptions{})
	if got, err := ReadAll(ctx, inner, "tenant/one/a/b"); err != nil || string(got) != "v" {
		t.Fatalf("inner object = %q, %v", got, err)
	}
	if attrs, err := p.Attributes(ctx, "a/b"); err != nil || attrs.Name != "a/b" {
		t.Fatalf("attributes = %+v, %v", attrs, err)
	}
	for _, tc := range []struct {
		prefix, after string
		want          []string
	}{
		{"", "", []string{"a/b", "c"}},
		{"a/", "", []string{"a/b"}},
		{"", "a/b", []string{"c"}},
		{"", "c", nil},
	} {
		page, err := p.List(ctx, tc.prefix, tc.after, 0)
		if err != nil || !slices.Equal(attrNames(page.Objects), tc.want) {
			t.Errorf("list %q after %q = %q, %v; want %q", tc.prefix, tc.after, attrNames(page.Objects), err, tc.want)
		}
	}
	if _, err := p.Get(ctx, "../outside"); !IsNotFound(err) {
		t.Fatalf("reached outside the prefix: %v", err)
	}
	if _, err := PutBytes(ctx, p, "../escape", []byte("x"), PutOptions{}); err == nil {
		t.Fatal("put outside the prefix succeeded")
	}
	for _, bad := range []string{"", "/", "a//b", "../x"} {
		if _, err := NewPrefixBucket(inner, bad); err == nil {
			t.Errorf("prefix %q accepted", bad)
		}
	}
}
