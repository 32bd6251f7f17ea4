package ledger

// ReaderNames answers how many strings r keeps.
func ReaderNames(r *Reader) int { return len(r.names) }

// MaxNames is the bound of the strings a Reader keeps.
const MaxNames = maxNames
