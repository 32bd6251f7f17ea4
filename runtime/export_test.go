package runtime

// MemorySize returns the linear memory size of an idle instance of m (tests).
func MemorySize(m *Module) uint32 {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.idle) == 0 {
		return 0
	}
	return m.idle[len(m.idle)-1].mem.Size()
}
