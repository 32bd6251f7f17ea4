package catalog

import "sync"

// WaitRetired waits until every retired module has been closed.
func (c *Catalog) WaitRetired() { c.retiring.Wait() }

// HoldRetiring stands for a retired module still finishing its calls in
// flight, until release is called (once or more).
func (c *Catalog) HoldRetiring() (release func()) {
	c.retiring.Add(1)
	return sync.OnceFunc(c.retiring.Done)
}
