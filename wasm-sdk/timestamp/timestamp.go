// Package timestamp converts the timestamp forms OpenStack services write to
// the event contract's form, RFC 3339 in UTC with a Z. It is the one copy of
// that conversion: the guest SDK's Event.Timestamp and the host's tally.emit
// (a timestamp operation) both use it, so that a timestamp a guest converts
// and one the host converts are the same text.
//
// Timestamps are converted by hand (no time package, no allocation): parse the
// civil fields, shift by the UTC offset through a day count when there is one,
// and print the civil fields back. It builds for GOOS=wasip1.
package timestamp

const maxFractionDigits = 9

// Append appends s, in one of the accepted forms, as RFC 3339 UTC:
//
//	2024-05-01 12:00:00              oslo, no fraction
//	2024-05-01 12:00:00.123456       oslo
//	2024-05-01T12:00:00[.f][Z]       ISO 8601, naive times are UTC
//	2024-05-01T14:00:00[.f]+02:00    offsets as ±HH:MM, ±HHMM or ±HH
//
// The result is 2024-05-01T12:00:00[.f]Z with the fraction's digits as given.
func Append(dst, s []byte) ([]byte, bool) {
	if len(s) < 19 { // "" above all: a member not set yet
		return dst, false
	}
	if t, ok := Naive(dst, s); ok {
		return t, true
	}
	return General(dst, s)
}

// General is Append for every accepted form: it parses the
// civil fields, shifts them by the offset and prints them back.
func General(dst, s []byte) ([]byte, bool) {
	if len(s) < 19 || s[4] != '-' || s[7] != '-' || s[13] != ':' || s[16] != ':' {
		return dst, false
	}
	switch s[10] {
	case ' ', 'T', 't':
	default:
		return dst, false
	}
	year, ok1 := digits(s[0:4])
	month, ok2 := digits(s[5:7])
	day, ok3 := digits(s[8:10])
	hour, ok4 := digits(s[11:13])
	minute, ok5 := digits(s[14:16])
	sec, ok6 := digits(s[17:19])
	if !(ok1 && ok2 && ok3 && ok4 && ok5 && ok6) ||
		month < 1 || month > 12 || day < 1 || day > daysIn(year, month) ||
		hour > 23 || minute > 59 || sec > 59 {
		return dst, false
	}
	rest := s[19:]
	var frac []byte
	if len(rest) > 0 && rest[0] == '.' {
		n := 1
		for n < len(rest) && rest[n] >= '0' && rest[n] <= '9' {
			n++
		}
		if n == 1 || n-1 > maxFractionDigits {
			return dst, false
		}
		frac, rest = rest[1:n], rest[n:]
	}
	offset := 0 // minutes east of UTC
	switch {
	case len(rest) == 0:
	case len(rest) == 1 && (rest[0] == 'Z' || rest[0] == 'z'):
	case rest[0] == '+' || rest[0] == '-':
		var oh, om int
		var ok bool
		switch {
		case len(rest) == 3:
			oh, ok = digits(rest[1:3])
		case len(rest) == 5:
			oh, ok = digits(rest[1:3])
			if ok {
				om, ok = digits(rest[3:5])
			}
		case len(rest) == 6 && rest[3] == ':':
			oh, ok = digits(rest[1:3])
			if ok {
				om, ok = digits(rest[4:6])
			}
		}
		if !ok || oh > 23 || om > 59 {
			return dst, false
		}
		offset = oh*60 + om
		if rest[0] == '-' {
			offset = -offset
		}
	default:
		return dst, false
	}
	if offset != 0 {
		mins := daysFromCivil(year, month, day)*1440 + int64(hour*60+minute) - int64(offset)
		days := floorDiv(mins, 1440)
		m := int(mins - days*1440)
		year, month, day = civilFromDays(days)
		hour, minute = m/60, m%60
		if year < 0 || year > 9999 {
			return dst, false
		}
	}
	// Each byte is '0' plus a digit, 0 to 9: year is 0 to 9999 (four digits,
	// or checked after the shift), month 1 to 12, day 1 to 31, hour 0 to 23,
	// minute and sec 0 to 59, all checked above.
	//nolint:gosec // every conversion is of '0' plus a digit, as above
	dst = append(dst,
		byte('0'+year/1000), byte('0'+year/100%10), byte('0'+year/10%10), byte('0'+year%10), '-',
		byte('0'+month/10), byte('0'+month%10), '-',
		byte('0'+day/10), byte('0'+day%10), 'T',
		byte('0'+hour/10), byte('0'+hour%10), ':',
		byte('0'+minute/10), byte('0'+minute%10), ':',
		byte('0'+sec/10), byte('0'+sec%10))
	if len(frac) > 0 {
		dst = append(dst, '.')
		dst = append(dst, frac...)
	}
	return append(dst, 'Z'), true
}

// Naive is the fast path of Append for the shape oslo writes,
// "2024-05-01 12:00:00[.ffffff]" (or with a 'T'), without a zone: the result
// is the input with a 'T' and a 'Z', so the fields are checked but never
// converted back to text. Anything else (a zone, more fraction digits, an
// invalid field) reports false and is left to the general path.
func Naive(dst, s []byte) ([]byte, bool) {
	n := len(s)
	if n != 19 && (n < 21 || n > 20+maxFractionDigits) {
		return dst, false
	}
	_ = s[18]
	if s[4] != '-' || s[7] != '-' || s[13] != ':' || s[16] != ':' || (s[10] != ' ' && s[10] != 'T') {
		return dst, false
	}
	// Every other byte of the first 19 must be a digit, and so must the
	// fraction's after its dot: nd(c) has a bit of its high nibble set for
	// any other byte, so one OR of them all tells.
	bad := nd(s[0]) | nd(s[1]) | nd(s[2]) | nd(s[3]) | nd(s[5]) | nd(s[6]) | nd(s[8]) | nd(s[9]) |
		nd(s[11]) | nd(s[12]) | nd(s[14]) | nd(s[15]) | nd(s[17]) | nd(s[18])
	if n > 19 {
		if s[19] != '.' {
			return dst, false
		}
		for _, c := range s[20:] {
			bad |= nd(c)
		}
	}
	if bad&0xf0 != 0 {
		return dst, false
	}
	month := int(s[5]-'0')*10 + int(s[6]-'0')
	day := int(s[8]-'0')*10 + int(s[9]-'0')
	if month < 1 || month > 12 || day < 1 ||
		s[11] > '2' || (s[11] == '2' && s[12] > '3') || s[14] > '5' || s[17] > '5' {
		return dst, false
	}
	if day > 28 {
		year := int(s[0]-'0')*1000 + int(s[1]-'0')*100 + int(s[2]-'0')*10 + int(s[3]-'0')
		if day > daysIn(year, month) {
			return dst, false
		}
	}
	dst = append(dst, s[:10]...)
	dst = append(dst, 'T')
	dst = append(dst, s[11:]...)
	return append(dst, 'Z'), true
}

// nd maps an ASCII digit to a byte whose high nibble is 0, and any other
// byte to one whose high nibble is not: c-'0' is at most 9 for a digit (plus
// 6, at most 15), from 10 to 0xf9 for a byte above '9' (plus 6, past 15),
// and from 0xfa for one below '0'.
func nd(c byte) byte { d := c - '0'; return (d + 6) | d }

// digits parses a fixed run of ASCII digits.
func digits(b []byte) (int, bool) {
	n := 0
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	return n, true
}

func isLeap(y int) bool { return y%4 == 0 && (y%100 != 0 || y%400 == 0) }

func daysIn(y, m int) int {
	switch m {
	case 2:
		if isLeap(y) {
			return 29
		}
		return 28
	case 4, 6, 9, 11:
		return 30
	}
	return 31
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if (a%b != 0) && ((a < 0) != (b < 0)) {
		q--
	}
	return q
}

// daysFromCivil counts days since 1970-01-01 in the proleptic Gregorian
// calendar (H. Hinnant's algorithm).
func daysFromCivil(y, m, d int) int64 {
	if m <= 2 {
		y--
	}
	era := floorDiv(int64(y), 400)
	yoe := int64(y) - era*400
	mp := int64((m + 9) % 12)
	doy := (153*mp+2)/5 + int64(d) - 1
	doe := yoe*365 + yoe/4 - yoe/100 + doy
	return era*146097 + doe - 719468
}

// civilFromDays is the inverse of daysFromCivil.
func civilFromDays(z int64) (y, m, d int) {
	z += 719468
	era := floorDiv(z, 146097)
	doe := z - era*146097
	yoe := (doe - doe/1460 + doe/36524 - doe/146096) / 365
	doy := doe - (365*yoe + yoe/4 - yoe/100)
	mp := (5*doy + 2) / 153
	d = int(doy - (153*mp+2)/5 + 1)
	m = int(mp + 3)
	if m > 12 {
		m -= 12
	}
	y = int(yoe + era*400)
	if m <= 2 {
		y++
	}
	return y, m, d
}
