;; flaky_v1: flaky 1.0.0, traps on every message.
;; Test module of the catalogue: one event per message, {"event_type":<event_type>,
;; "event_id":<message_id>,...,"attributes":{"variant":"x"}}, the other members the
;; event contract requires fixed. Layout: manifest at 0, constant
;; strings from 512, output at 4096, input at 65536 (see tally_alloc).
(module
  (import "tally" "field" (func $field (param i32 i32) (result i64)))
  (memory (export "memory") 2)
  (data (i32.const 0) "{\22name\22:\22flaky\22,\22version\22:\221.0.0\22,\22event_types\22:[\22flaky.*\22],\22releases\22:[\222024.1\22]}")
  (data (i32.const 512) "{\22events\22:[{\22event_type\22:\22")
  (data (i32.const 540) "\22,\22event_id\22:\22")
  (data (i32.const 556) "\22,\22variant\22:\22x\22}]}")
  (data (i32.const 576) "{\22error\22:\22no event_type\22}")
  (data (i32.const 603) "event_type")
  (data (i32.const 615) "message_id")
  (func (export "tally_abi_version_1"))
  (func (export "tally_alloc") (param $size i32) (result i32)
    (local $need i32)
    (local.set $need (i32.shr_u (i32.add (local.get $size) (i32.const 131071)) (i32.const 16)))
    (if (i32.gt_u (local.get $need) (memory.size))
      (then
        (if (i32.eq (memory.grow (i32.sub (local.get $need) (memory.size))) (i32.const -1))
          (then (return (i32.const 0))))))
    (i32.const 65536))
  (func (export "tally_manifest") (result i64) (i64.const 82))
  (global $out (mut i32) (i32.const 4096))
  (func $put (param $src i32) (param $n i32)
    (memory.copy (global.get $out) (local.get $src) (local.get $n))
    (global.set $out (i32.add (global.get $out) (local.get $n))))
  (func $span (param $r i64)
    (call $put
      (i32.add (i32.const 65536) (i32.wrap_i64 (i64.and (i64.shr_u (local.get $r) (i64.const 28)) (i64.const 0xfffffff))))
      (i32.wrap_i64 (i64.and (local.get $r) (i64.const 0xfffffff)))))
  (func (export "tally_map") (param $ptr i32) (param $len i32) (result i64)
    (unreachable))
)
