;; forbidden: imports a function from a module the host does not offer (env.x);
;; the runtime refuses it at load. Layout as in the other test modules.
(module
  (import "env" "x" (func $x))
  (memory (export "memory") 2)
  (data (i32.const 0) "{\22name\22:\22echo\22,\22version\22:\223.0.0\22,\22event_types\22:[\22test.*\22],\22releases\22:[\222024.1\22]}")
  (func (export "tally_abi_version_1"))
  (func (export "tally_alloc") (param $size i32) (result i32) (i32.const 65536))
  (func (export "tally_manifest") (result i64) (i64.const 80))
  (func (export "tally_map") (param i32 i32) (result i64) (call $x) (i64.const 0))
)
