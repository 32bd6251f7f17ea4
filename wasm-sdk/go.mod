module github.com/tally-billing/tally-openstack-collector/wasm-sdk

go 1.26.8
