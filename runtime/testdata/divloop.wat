;; divloop: tally_map never returns: an endless chain of dependent 64-bit
;; divisions, the instruction that costs the most time for one charged by the
;; metering pass (BenchmarkMeteredRunaway).
;; Generated layout: manifest at 0, constant strings from 512, output scratch at 4096,
;; input at 65536 (see tally_alloc).
(module
  (memory (export "memory") 2)
  (data (i32.const 0) "{\22name\22:\22divloop\22,\22version\22:\221.0.0\22,\22event_types\22:[\22*\22],\22releases\22:[\222024.1\22]}")
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
  (func (export "tally_manifest") (result i64) (i64.or (i64.shl (i64.const 0) (i64.const 32)) (i64.const 78)))
  (func (export "tally_map") (param i32 i32) (result i64)
    (local $x i64)
    (local.set $x (i64.const -1))
    (loop $l
      (local.set $x (i64.div_u (i64.const -1) (i64.or (i64.div_u (local.get $x) (i64.const 3)) (i64.const 1))))
      (local.set $x (i64.div_u (i64.const -1) (i64.or (i64.div_u (local.get $x) (i64.const 5)) (i64.const 1))))
      (local.set $x (i64.div_u (i64.const -1) (i64.or (i64.div_u (local.get $x) (i64.const 7)) (i64.const 1))))
      (local.set $x (i64.div_u (i64.const -1) (i64.or (i64.div_u (local.get $x) (i64.const 9)) (i64.const 1))))
      (br $l))
    unreachable)
)
