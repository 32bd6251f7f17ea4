package catalog

// WaitRetired waits until every retired module has been closed.
func (c *Catalog) WaitRetired() { c.retiring.Wait() }
