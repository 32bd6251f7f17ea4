# The C example mapper, built with Debian's clang-14, lld-14 and wasi-libc as a
# WASI reactor (crt1-reactor.o provides _initialize). A test module: part of
# `make test-wasm`, not of `make build`.

C_MAPPER_CFLAGS := --target=wasm32-wasi -mexec-model=reactor -O2 -std=c11 -Wall -Wextra -Werror \
	-fuse-ld=lld -Wl,--strip-all

examples/c-mapper/c-mapper.wasm: examples/c-mapper/src/mapper.c examples/c-mapper/src/tally.h
	$(CLANG) $(C_MAPPER_CFLAGS) -o $@ examples/c-mapper/src/mapper.c

test-wasm: examples/c-mapper/c-mapper.wasm
