;; emitops: hands the host a table of tally.emit operations that the test
;; (runtime/emit_test.go) writes into the input, and answers as the input's
;; header says. Input (at 65536): u32 mode, u32 count, u32 the table's
;; address, u32 0, then whatever the table points to. Modes:
;;   0  emit(table, count) must answer 0 (else trap); return 0
;;   1  emit; return the document {"events":[]} (a document after an emit)
;;   2  emit twice; return 0
;;   3  emit; trap
;;   4  no emit; tally_manifest called emit (outside tally_map), which must
;;      have answered -1 (else trap); return {"events":[]}
;;   5  emit must answer -1 (else trap); return 0
(module
  (import "tally" "emit" (func $emit (param i32 i32) (result i32)))
  (memory (export "memory") 2)
  (data (i32.const 0) "{\22name\22:\22emitops\22,\22version\22:\221.0.0\22,\22event_types\22:[\22*\22],\22releases\22:[\222024.1\22]}")
  (data (i32.const 300) "{\22events\22:[]}")
  (global $manifestEmit (mut i32) (i32.const 0))
  (func (export "tally_abi_version_1"))
  (func (export "tally_alloc") (param $size i32) (result i32)
    (local $need i32)
    (local.set $need (i32.shr_u (i32.add (local.get $size) (i32.const 131071)) (i32.const 16)))
    (if (i32.gt_u (local.get $need) (memory.size))
      (then
        (if (i32.eq (memory.grow (i32.sub (local.get $need) (memory.size))) (i32.const -1))
          (then (return (i32.const 0))))))
    (i32.const 65536))
  (func (export "tally_manifest") (result i64)
    (global.set $manifestEmit (call $emit (i32.const 0) (i32.const 0)))
    (i64.const 78))
  (func $emitTable (param $ptr i32) (result i32)
    (call $emit (i32.load offset=8 (local.get $ptr)) (i32.load offset=4 (local.get $ptr))))
  (func (export "tally_map") (param $ptr i32) (param $len i32) (result i64)
    (local $mode i32) (local $r i32)
    (local.set $mode (i32.load (local.get $ptr)))
    (if (i32.eq (local.get $mode) (i32.const 4))
      (then
        (if (i32.ne (global.get $manifestEmit) (i32.const -1)) (then unreachable))
        (return (i64.const 1288490188813))))
    (local.set $r (call $emitTable (local.get $ptr)))
    (if (i32.eq (local.get $mode) (i32.const 0))
      (then
        (if (local.get $r) (then unreachable))
        (return (i64.const 0))))
    (if (i32.eq (local.get $mode) (i32.const 1))
      (then (return (i64.const 1288490188813))))
    (if (i32.eq (local.get $mode) (i32.const 2))
      (then
        (drop (call $emitTable (local.get $ptr)))
        (return (i64.const 0))))
    (if (i32.eq (local.get $mode) (i32.const 3)) (then unreachable))
    (if (i32.ne (local.get $r) (i32.const -1)) (then unreachable))
    (i64.const 0)))
