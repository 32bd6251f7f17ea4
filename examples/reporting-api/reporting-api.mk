# The reference Reporting API (examples/reporting-api).
.PHONY: reporting-api
reporting-api:
	$(GO) build -o bin/reporting-api ./examples/reporting-api
