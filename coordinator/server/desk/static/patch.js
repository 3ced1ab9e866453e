// RFC 6902 JSON Patch from two JSON values: what the reviewer changed.
// Deterministic, so the patch a reviewer sends is predictable: object keys
// removed (in the draft's order), then kept keys compared and new keys added
// (in the edit's order); arrays compared index by index, grown at the end
// or shrunk from the end; anything else that differs is replaced.

export function escapePointer(key) {
  return String(key).replace(/~/g, "~0").replace(/\//g, "~1");
}

function isObject(value) {
  return value !== null && typeof value === "object" && !Array.isArray(value);
}

export function equal(a, b) {
  if (a === b) return true;
  if (Array.isArray(a) && Array.isArray(b)) {
    return a.length === b.length && a.every((item, i) => equal(item, b[i]));
  }
  if (isObject(a) && isObject(b)) {
    const keys = Object.keys(a);
    return keys.length === Object.keys(b).length &&
      keys.every((k) => Object.prototype.hasOwnProperty.call(b, k) && equal(a[k], b[k]));
  }
  return false;
}

export function diff(before, after, path = "") {
  if (equal(before, after)) return [];
  if (isObject(before) && isObject(after)) {
    const ops = [];
    for (const key of Object.keys(before)) {
      if (!Object.prototype.hasOwnProperty.call(after, key)) {
        ops.push({ op: "remove", path: `${path}/${escapePointer(key)}` });
      }
    }
    for (const key of Object.keys(after)) {
      const at = `${path}/${escapePointer(key)}`;
      if (Object.prototype.hasOwnProperty.call(before, key)) {
        ops.push(...diff(before[key], after[key], at));
      } else {
        ops.push({ op: "add", path: at, value: after[key] });
      }
    }
    return ops;
  }
  if (Array.isArray(before) && Array.isArray(after)) {
    const ops = [];
    const common = Math.min(before.length, after.length);
    for (let i = 0; i < common; i++) ops.push(...diff(before[i], after[i], `${path}/${i}`));
    for (let i = common; i < after.length; i++) {
      ops.push({ op: "add", path: `${path}/${i}`, value: after[i] });
    }
    for (let i = before.length - 1; i >= common; i--) {
      ops.push({ op: "remove", path: `${path}/${i}` });
    }
    return ops;
  }
  return [{ op: "replace", path, value: after }];
}
