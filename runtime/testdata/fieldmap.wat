;; fieldmap: a minimal real mapper. It asks the host for event_type and message_id
;; (tally.field), logs a line (tally.log) and writes one event, including a forged
;; "source" member the host must replace, and fixed values of the other members the
;; event contract requires (timestamp, service, resource_type, resource_id, project_id, action). Without a string event_type it answers an error.
;; Generated layout: manifest at 0, constant strings from 512, output scratch at 4096,
;; input at 65536 (see tally_alloc).
(module
  (import "tally" "log" (func $log (param i32 i32 i32)))
  (import "tally" "field" (func $field (param i32 i32) (result i64)))
  (memory (export "memory") 2)
  (data (i32.const 0) "{\22name\22:\22fieldmap\22,\22version\22:\221.0.0\22,\22event_types\22:[\22*\22],\22releases\22:[\222024.1\22]}")
  (data (i32.const 512) "{\22events\22:[{\22event_type\22:\22")
  (data (i32.const 546) "\22,\22event_id\22:\22")
  (data (i32.const 568) "\22,\22source\22:{\22mapper\22:\22forged\22}}]}")
  (data (i32.const 609) "{\22error\22:\22no event_type\22}")
  (data (i32.const 642) "event_type")
  (data (i32.const 660) "message_id")
  (data (i32.const 678) "mapping one message")
  (data (i32.const 1024) "\22,\22timestamp\22:\222024-05-01T12:00:00Z\22,\22service\22:\22test\22,\22resource_type\22:\22thing\22,\22resource_id\22:\22r1\22,\22project_id\22:\22p1\22,\22action\22:\22map\22,\22source\22:{\22mapper\22:\22forged\22}}]}")
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
  (func (export "tally_manifest") (result i64) (i64.or (i64.shl (i64.const 0) (i64.const 32)) (i64.const 79)))
  (global $out (mut i32) (i32.const 4096))
  ;; put copies n bytes from src to the output cursor.
  (func $put (param $src i32) (param $n i32)
    (memory.copy (global.get $out) (local.get $src) (local.get $n))
    (global.set $out (i32.add (global.get $out) (local.get $n))))
  ;; span copies a field result (kind<<56 | start<<28 | len) out of the input at 65536.
  (func $span (param $r i64)
    (call $put
      (i32.add (i32.const 65536) (i32.wrap_i64 (i64.and (i64.shr_u (local.get $r) (i64.const 28)) (i64.const 0xfffffff))))
      (i32.wrap_i64 (i64.and (local.get $r) (i64.const 0xfffffff)))))
  (func (export "tally_map") (param $ptr i32) (param $len i32) (result i64)
    (local $et i64) (local $mid i64)
    (call $log (i32.const 0) (i32.const 678) (i32.const 19))
    (local.set $et (call $field (i32.const 642) (i32.const 10)))
    (if (i64.ne (i64.shr_u (local.get $et) (i64.const 56)) (i64.const 2))
      (then (return (i64.or (i64.shl (i64.const 609) (i64.const 32)) (i64.const 25)))))
    (local.set $mid (call $field (i32.const 660) (i32.const 10)))
    (global.set $out (i32.const 4096))
    (call $put (i32.const 512) (i32.const 26))
    (call $span (local.get $et))
    (call $put (i32.const 546) (i32.const 14))
    (if (i64.eq (i64.shr_u (local.get $mid) (i64.const 56)) (i64.const 2))
      (then (call $span (local.get $mid))))
    (call $put (i32.const 1024) (i32.const 161))
    (i64.or (i64.const 0x100000000000) (i64.extend_i32_u (i32.sub (global.get $out) (i32.const 4096)))))
)
