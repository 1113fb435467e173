/** CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), the checksum of TFRecord framing. */
const TABLE = (() => {
  const t = new Uint32Array(256);
  for (let n = 0; n < 256; n++) {
    let c = n;
    for (let k = 0; k < 8; k++) c = c & 1 ? (c >>> 1) ^ 0x82f63b78 : c >>> 1;
    t[n] = c >>> 0;
  }
  return t;
})();

export function crc32c(data: Uint8Array): number {
  let crc = 0xffffffff;
  for (let i = 0; i < data.length; i++) crc = TABLE[(crc ^ data[i]!) & 0xff]! ^ (crc >>> 8);
  return (crc ^ 0xffffffff) >>> 0;
}

/** TFRecord's masked CRC: rotate right by 15 and add a constant, so a CRC of CRCs does not collide. */
export function maskedCrc32c(data: Uint8Array): number {
  const crc = crc32c(data);
  return (((crc >>> 15) | (crc << 17)) + 0xa282ead8) >>> 0;
}
