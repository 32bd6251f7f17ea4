package client

import "sync"

// The open clients of this process, by application name (Options.Name), in
// the order they were created: what Find and List look up.
var registry struct {
	mu      sync.Mutex
	clients []*Client
}

func register(c *Client) {
	registry.mu.Lock()
	registry.clients = append(registry.clients, c)
	registry.mu.Unlock()
}

func unregister(c *Client) {
	registry.mu.Lock()
	defer registry.mu.Unlock()
	for i, o := range registry.clients {
		if o == c {
			registry.clients = append(registry.clients[:i], registry.clients[i+1:]...)
			return
		}
	}
}

// Find returns the oldest open client of this process created with the
// application name name, or nil.
func Find(name string) *Client {
	registry.mu.Lock()
	defer registry.mu.Unlock()
	for _, c := range registry.clients {
		if c.opts.Name == name {
			return c
		}
	}
	return nil
}

// List returns the open clients of this process created with the
// application name name (every open client when name is empty), oldest
// first. A client leaves the list when Close returns.
func List(name string) []*Client {
	registry.mu.Lock()
	defer registry.mu.Unlock()
	var out []*Client
	for _, c := range registry.clients {
		if name == "" || c.opts.Name == name {
			out = append(out, c)
		}
	}
	return out
}
