;; spin: answers {"events":[]}; an input of 64 bytes or more first spins
;; len << 20 turns of a loop without calls (about a second for 2 KB of input
;; unguarded; guarded, every turn is a termination check and it takes far
;; longer). A guest that overruns its deadline and then returns by itself.
;; Layout: manifest at 0, constant strings from 512, input at 65536 (see tally_alloc).
(module
  (memory (export "memory") 2)
  (data (i32.const 0) "{\22name\22:\22spin\22,\22version\22:\221.0.0\22,\22event_types\22:[\22*\22],\22releases\22:[\222024.1\22]}")
  (data (i32.const 512) "{\22events\22:[]}")
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
  (func (export "tally_manifest") (result i64) (i64.const 75))
  (func (export "tally_map") (param $ptr i32) (param $len i32) (result i64)
    (local $n i64)
    (if (i32.ge_u (local.get $len) (i32.const 64))
      (then
        (local.set $n (i64.shl (i64.extend_i32_u (local.get $len)) (i64.const 20)))
        (loop $l
          (local.set $n (i64.sub (local.get $n) (i64.const 1)))
          (br_if $l (i64.gt_s (local.get $n) (i64.const 0))))))
    (i64.or (i64.shl (i64.const 512) (i64.const 32)) (i64.const 13)))
)
