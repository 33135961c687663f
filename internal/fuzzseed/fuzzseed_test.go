package fuzzseed

import "testing"

func TestEncode(t *testing.T) {
	got := string(Encode([]byte("a\"\x00"), true, []byte{}))
	want := "go test fuzz v1\n[]byte(\"a\\\"\\x00\")\nbool(true)\n[]byte(\"\")\n"
	if got != want {
		t.Fatalf("Encode = %q, want %q", got, want)
	}
}
