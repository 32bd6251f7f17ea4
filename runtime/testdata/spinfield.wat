;; spinfield: spins len << 20 turns of a loop without calls (about a second
;; for 2 KB of input, unguarded), then calls tally.field for ever: a guest
;; past its deadline that is not calling the host when its caller gives up,
;; and does later.
;; Layout: manifest at 0, constant strings from 512, input at 65536 (see tally_alloc).
(module
  (import "tally" "field" (func $field (param i32 i32) (result i64)))
  (memory (export "memory") 2)
  (data (i32.const 0) "{\22name\22:\22spinfield\22,\22version\22:\221.0.0\22,\22event_types\22:[\22*\22],\22releases\22:[\222024.1\22]}")
  (data (i32.const 512) "x")
  (func (export "tally_abi_version_1"))
  ;; One input buffer at 64 KiB, grown as needed; 0 when memory cannot grow.
  (func (export "tally_alloc") (param $size i32) (result i32)
    (local $need i32)
    (local.set $need (i32.shr_u (i32.add (local.get $size) (i32.const 131071)) (i32.const 16)))
    (if (i32.gt_u (local.get $need) (memory.size))
      (then
        (if (i32.eq (memory.grow (i32.sub (local.get $need) (memory.size))) (i32.const -1))
          (then (return (i32.const 0))))))
    (i32.const 65536))
  (func (export "tally_manifest") (result i64) (i64.const 80))
  (func (export "tally_map") (param $ptr i32) (param $len i32) (result i64)
    (local $n i64)
    (local.set $n (i64.shl (i64.extend_i32_u (local.get $len)) (i64.const 20)))
    (loop $spin
      (local.set $n (i64.sub (local.get $n) (i64.const 1)))
      (br_if $spin (i64.gt_s (local.get $n) (i64.const 0))))
    (loop $l (drop (call $field (i32.const 512) (i32.const 1))) (br $l))
    unreachable)
)
