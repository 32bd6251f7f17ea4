# The example publisher (examples/publisher): bin/tally-publisher.
.PHONY: publisher
publisher:
	$(GO) build -o bin/tally-publisher ./examples/publisher
