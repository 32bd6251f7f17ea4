;; counter: keeps a count of its calls in a global and writes its last digit into
;; the event_id, so the same input maps to a different event each time: the
;; kind of mapper `mapper test` must refuse (redeliveries are deduplicated by
;; event_id); the other members the event contract requires are fixed. Layout: manifest at 0, output at 512, input at 65536.
(module
  (memory (export "memory") 2)
  (data (i32.const 0) "{\22name\22:\22counter\22,\22version\22:\221.0.0\22,\22event_types\22:[\22test.*\22],\22releases\22:[\222024.1\22]}")
  (data (i32.const 512) "{\22events\22:[{\22event_type\22:\22test.count\22,\22event_id\22:\22n0\22,\22timestamp\22:\222024-05-01T12:00:00Z\22,\22service\22:\22test\22,\22resource_type\22:\22thing\22,\22resource_id\22:\22r1\22,\22project_id\22:\22p1\22,\22action\22:\22count\22}]}")
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
  (func (export "tally_manifest") (result i64) (i64.const 83))
  (func (export "tally_map") (param i32 i32) (result i64)
    (global.set $calls (i32.add (global.get $calls) (i32.const 1)))
    (i32.store8 (i32.const 563) (i32.add (i32.const 48) (i32.rem_u (global.get $calls) (i32.const 10))))
    (i64.or (i64.shl (i64.const 512) (i64.const 32)) (i64.const 186)))
)
