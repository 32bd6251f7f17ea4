package sdk

import "testing"

// Text makes a Value of text a mapper parsed itself: written as a string, as
// a number when it holds one, as a timestamp when it is one.
func TestText(t *testing.T) {
	var o Output
	o.reset()
	e := o.Event()
	e.StrValue("s", Text(`a "quoted" word`))
	e.NumValue("n", Text("2.5"))
	e.NumValue("not", Text("2.5x"))
	e.Timestamp("ts", Text("2024-05-01 12:00:00"))
	e.End()
	want := `{"events":[{"s":"a \"quoted\" word","n":2.5,"ts":"2024-05-01T12:00:00Z"}]}`
	if got := string(o.finish()); got != want {
		t.Fatalf("\n got %s\nwant %s", got, want)
	}
	if !Text("abc").Equal("abc") || Text("abc").Kind() != String {
		t.Fatal("Equal or Kind")
	}
	if n := testing.AllocsPerRun(100, func() { _ = Text("plain text, no escapes") }); n != 0 {
		t.Fatalf("Text of plain text allocates %v times", n)
	}
}
