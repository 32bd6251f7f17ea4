;; loopafter: answers {"events":[]} to its first 3,000 calls, then never returns
;; (an endless loop without calls): a module that starts looping after a good run.
;; Layout: manifest at 0, constant strings from 512, input at 65536 (see tally_alloc).
(module
  (memory (export "memory") 2)
  (data (i32.const 0) "{\22name\22:\22loopafter\22,\22version\22:\221.0.0\22,\22event_types\22:[\22*\22],\22releases\22:[\222024.1\22]}")
  (data (i32.const 512) "{\22events\22:[]}")
  (global $calls (mut i32) (i32.const 0))
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
  (func (export "tally_map") (param i32 i32) (result i64)
    (global.set $calls (i32.add (global.get $calls) (i32.const 1)))
    (if (i32.gt_u (global.get $calls) (i32.const 3000))
      (then (loop $l (br $l))))
    (i64.or (i64.shl (i64.const 512) (i64.const 32)) (i64.const 13)))
)
