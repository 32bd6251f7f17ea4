package runtime

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// The compilation cache (Config.CacheDir) is wazero's file cache: one file
// per compiled module under <CacheDir>/wazero-<version>-<arch>-<os>/, named
// by a key wazero derives from the module's bytes (after the metering pass,
// which writes its own version into them), the engine's settings that change
// the code (termination checks) and the CPU's features. wazero writes an
// entry to a temporary file and renames it into place, so a process never
// reads another's half-written entry. An entry damaged afterwards (a disk
// full while copying a cache, a truncated file) makes wazero fail the
// compilation with an error starting "compilationcache:" instead of
// compiling again; compile then removes the entries that do not read back
// (purgeDamagedEntries) and compiles once more.

// cacheEntryErrorPrefix begins every error wazero returns for a cache entry
// it could not read back.
const cacheEntryErrorPrefix = "compilationcache:"

func isCacheEntryError(err error) bool {
	return err != nil && strings.Contains(err.Error(), cacheEntryErrorPrefix)
}

// wazeroMagic begins every entry of wazero's compiler (internal/engine/wazevo).
var wazeroMagic = []byte("WAZEVO")

// castagnoli is the checksum of an entry's machine code.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// purgeDamagedEntries removes every entry of the compilation cache under dir
// that does not read back whole, and answers the files removed. Temporary
// files (another process writing an entry) are left alone.
func purgeDamagedEntries(dir string) ([]string, error) {
	subs, err := filepath.Glob(filepath.Join(dir, "wazero-*"))
	if err != nil {
		return nil, fmt.Errorf("compilation cache %s: %w", dir, err)
	}
	var removed []string
	var errs []error
	for _, sub := range subs {
		ents, err := os.ReadDir(sub)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, ent := range ents {
			if ent.IsDir() || strings.HasSuffix(ent.Name(), ".tmp") {
				continue
			}
			p := filepath.Join(sub, ent.Name())
			if err := checkCacheEntry(p); err == nil {
				continue
			}
			if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, err)
				continue
			}
			removed = append(removed, p)
		}
	}
	return removed, errors.Join(errs...)
}

// checkCacheEntry reads the entry at path as wazero's compiler wrote it
// (magic, version, function offsets, machine code and its CRC-32C, source
// map, catch-clause table) and fails when it is cut short or its code does
// not match its checksum.
func checkCacheEntry(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }() // opened to read: closing loses nothing
	st, err := f.Stat()
	if err != nil {
		return err
	}
	size := uint64(st.Size())
	r := bufio.NewReader(f)
	var hdr [7]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return err
	}
	if !bytes.Equal(hdr[:6], wazeroMagic) {
		return errors.New("not a wazero entry")
	}
	if _, err := r.Discard(int(hdr[6])); err != nil {
		return err
	}
	u32 := func() (uint32, error) {
		var b [4]byte
		_, err := io.ReadFull(r, b[:])
		return binary.LittleEndian.Uint32(b[:]), err
	}
	u64 := func() (uint64, error) {
		var b [8]byte
		_, err := io.ReadFull(r, b[:])
		return binary.LittleEndian.Uint64(b[:]), err
	}
	// skip passes n records of width bytes, named what in the error when
	// they would run past the end of the file.
	skip := func(n, width uint64, what string) error {
		if n*width > size {
			return fmt.Errorf("%s past the end", what)
		}
		_, err := r.Discard(int(n * width))
		return err
	}
	n, err := u32()
	if err != nil {
		return err
	}
	if err := skip(uint64(n), 8, "function count"); err != nil {
		return err
	}
	codeLen, err := u64()
	if err != nil {
		return err
	}
	if codeLen > size {
		return errors.New("code length past the end")
	}
	h := crc32.New(castagnoli)
	if _, err := io.CopyN(h, r, int64(codeLen)); err != nil {
		return err
	}
	sum, err := u32()
	if err != nil {
		return err
	}
	if codeLen > 0 && sum != h.Sum32() {
		return errors.New("code checksum mismatch")
	}
	flag, err := r.ReadByte()
	if err != nil {
		return err
	}
	if flag == 1 {
		l, err := u64()
		if err != nil {
			return err
		}
		if err := skip(l, 16, "source map"); err != nil {
			return err
		}
	}
	tables, err := u32()
	if err != nil {
		// An entry of an older wazero ends here; wazero treats it as stale
		// and compiles again by itself.
		return nil
	}
	for i := uint32(0); i < tables; i++ {
		c, err := u32()
		if err != nil {
			return err
		}
		if err := skip(uint64(c), 5, "catch clauses"); err != nil {
			return err
		}
	}
	return nil
}
