# Thin wrapper over CMake (see scripts/). `make`, `make test`, `make debug`, `make asan`, `make fuzz`, `make demo`.
.PHONY: all release debug asan test test-asan fuzz demo clean
all release:
	@sh scripts/build.sh release >/dev/null
debug:
	@sh scripts/build.sh debug >/dev/null
asan:
	@sh scripts/build.sh asan >/dev/null
test:
	@sh scripts/test.sh
test-asan:
	@sh scripts/test.sh asan
fuzz:
	@sh scripts/fuzz.sh 60
demo:
	@sh scripts/demo.sh
clean:
	rm -rf build build-debug build-asan build-fuzz
