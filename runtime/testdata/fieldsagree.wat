;; fieldsagree: asks for the same paths with one tally.fields call and with
;; one tally.field call each, and reports whether every answer agrees
;; ("agree": "y" or "n") and the answers of tally.fields, as 16 hex digits
;; each (the packed i64), 32 paths to an attribute ("ra", "rb", ...).
;; runtime/fields_test.go holds the same paths (fieldsAgreePaths), NUL-separated
;; at 1024 here and ended by a 0xff byte.
;; Layout: manifest at 0, output pieces from 200, hex digits at 700, the paths
;; at 1024, the (ptr, len) table at 8192, the answers of fields at 12288 and
;; of field at 16384, output at 20480, input at 65536.
(module
  (import "tally" "field" (func $field (param i32 i32) (result i64)))
  (import "tally" "fields" (func $fields (param i32 i32 i32) (result i32)))
  (memory (export "memory") 2)
  (data (i32.const 0) "{\22name\22:\22fieldsagree\22,\22version\22:\221.0.0\22,\22event_types\22:[\22*\22],\22releases\22:[\222024.1\22]}")
  (data (i32.const 200) "{\22events\22:[{\22event_type\22:\22fields.agree\22,\22attributes\22:{\22agree\22:\22")
  (data (i32.const 300) "\22,\22r")
  (data (i32.const 310) "\22:\22")
  (data (i32.const 400) "\22},\22event_id\22:\22f1\22,\22timestamp\22:\222024-05-01T12:00:00Z\22,\22service\22:\22test\22,\22resource_type\22:\22thing\22,\22resource_id\22:\22r1\22,\22project_id\22:\22p1\22,\22action\22:\22fields\22}]}")
  (data (i32.const 700) "0123456789abcdef")
  (data (i32.const 1024) "event_type\00message_id\00timestamp\00publisher_id\00payload.nova_object\5c.data\00payload.instance_id\00payload.tenant_id\00payload.memory_mb\00payload.state\00payload.image_meta.base_image_ref\00dup\00dup.x\00dup.y\00\5cdup\00d\5cup.y\00payload.dup\00payload.dup.k\00payload.\5cdup.k\00payload.a\5c.b\00payload.a.b\00payload.e\5c\5cf\00payload.list.0\00payload.list.1.k\00payload.list.1\00payload.list.9\00payload.list.\5c0\00payload.list.01\00\00.\00payload.\00.x\00nope\00nope.x\00payload.nope\00payload.p3\00payload.p39\00payload.image_meta\00payload.image_meta.nope\00payload.dup.k.z\00event_type.x\00payload.nova_object\5c.data.uuid\00esc\00payload\5c.dup\00\ff")
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
  (global $out (mut i32) (i32.const 20480))
  (func $put (param $src i32) (param $n i32)
    (memory.copy (global.get $out) (local.get $src) (local.get $n))
    (global.set $out (i32.add (global.get $out) (local.get $n))))
  (func $byte (param $c i32)
    (i32.store8 (global.get $out) (local.get $c))
    (global.set $out (i32.add (global.get $out) (i32.const 1))))
  (func $hex (param $v i64) (local $k i32)
    (local.set $k (i32.const 60))
    (loop $h
      (call $byte (i32.load8_u (i32.add (i32.const 700)
        (i32.wrap_i64 (i64.and (i64.shr_u (local.get $v) (i64.extend_i32_u (local.get $k))) (i64.const 15))))))
      (local.set $k (i32.sub (local.get $k) (i32.const 4)))
      (br_if $h (i32.ge_s (local.get $k) (i32.const 0)))))
  (func $slot (param $base i32) (param $i i32) (result i32)
    (i32.add (local.get $base) (i32.shl (local.get $i) (i32.const 3))))
  (func (export "tally_map") (param $ptr i32) (param $len i32) (result i64)
    (local $p i32) (local $s i32) (local $n i32) (local $i i32) (local $agree i32)
    ;; The (ptr, len) table of the NUL-separated paths.
    (local.set $p (i32.const 1024))
    (block $done
      (loop $next
        (br_if $done (i32.eq (i32.load8_u (local.get $p)) (i32.const 255)))
        (local.set $s (local.get $p))
        (block $end
          (loop $scan
            (br_if $end (i32.eqz (i32.load8_u (local.get $p))))
            (local.set $p (i32.add (local.get $p) (i32.const 1)))
            (br $scan)))
        (i32.store (call $slot (i32.const 8192) (local.get $n)) (local.get $s))
        (i32.store (i32.add (call $slot (i32.const 8192) (local.get $n)) (i32.const 4)) (i32.sub (local.get $p) (local.get $s)))
        (local.set $n (i32.add (local.get $n) (i32.const 1)))
        (local.set $p (i32.add (local.get $p) (i32.const 1)))
        (br $next)))
    ;; All at once, then one at a time.
    (drop (call $fields (i32.const 8192) (local.get $n) (i32.const 12288)))
    (local.set $agree (i32.const 1))
    (block $d2
      (loop $l2
        (br_if $d2 (i32.ge_u (local.get $i) (local.get $n)))
        (i64.store (call $slot (i32.const 16384) (local.get $i))
          (call $field (i32.load (call $slot (i32.const 8192) (local.get $i)))
                       (i32.load (i32.add (call $slot (i32.const 8192) (local.get $i)) (i32.const 4)))))
        (if (i64.ne (i64.load (call $slot (i32.const 16384) (local.get $i)))
                    (i64.load (call $slot (i32.const 12288) (local.get $i))))
          (then (local.set $agree (i32.const 0))))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $l2)))
    (global.set $out (i32.const 20480))
    (call $put (i32.const 200) (i32.const 63))
    (call $byte (select (i32.const 121) (i32.const 110) (local.get $agree)))
    (local.set $i (i32.const 0))
    (block $d3
      (loop $l3
        (br_if $d3 (i32.ge_u (local.get $i) (local.get $n)))
        (if (i32.eqz (i32.and (local.get $i) (i32.const 31)))
          (then
            (call $put (i32.const 300) (i32.const 4))
            (call $byte (i32.add (i32.const 97) (i32.shr_u (local.get $i) (i32.const 5))))
            (call $put (i32.const 310) (i32.const 3))))
        (call $hex (i64.load (call $slot (i32.const 12288) (local.get $i))))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $l3)))
    (call $put (i32.const 400) (i32.const 152))
    (i64.or (i64.const 0x500000000000) (i64.extend_i32_u (i32.sub (global.get $out) (i32.const 20480)))))
)
