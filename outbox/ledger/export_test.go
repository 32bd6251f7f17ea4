package ledger

// ReaderNames answers how many strings r keeps.
func ReaderNames(r *Reader) int { return len(r.names) }

// MaxNames is the bound of the strings a Reader keeps.
const MaxNames = maxNames

// ReaderNameBytes answers how many bytes the strings r keeps take.
func ReaderNameBytes(r *Reader) int {
	n := 0
	for k := range r.names {
		n += len(k)
	}
	return n
}
