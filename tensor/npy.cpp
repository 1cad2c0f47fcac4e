// .npy and .npz files (tensor/io.h).
//
// .npy: the 6-byte magic "\x93NUMPY", a major and a minor version byte, the header length (uint16 LE for 1.0,
// uint32 LE for 2.0 and 3.0), then the header, a Python dict literal
//   {'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }
// padded with spaces and ended by '\n' so that the data start on a 64-byte boundary, then the raw data.
// .npz: a zip archive of such files (see detail below, in the npz section).
#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>
#include <optional>
#include <string_view>
#include <vector>

#if MT_HAS_ZLIB
#include <zlib.h>
#endif

#include "minitensor/tensor/io.h"

namespace mt {
namespace {

using Bytes = std::vector<unsigned char>;

constexpr std::string_view kNpyMagic = "\x93NUMPY";
constexpr std::size_t kNpyAlign = 64;  // numpy aligns the data to 64 bytes (enough for any SIMD load)

// ---------------------------------------------------------------- little-endian fields

std::uint64_t get_le(const unsigned char* p, int n_bytes) {
  std::uint64_t v = 0;
  for (int i = n_bytes - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

void put_le(Bytes& out, std::uint64_t v, int n_bytes) {
  for (int i = 0; i < n_bytes; ++i) out.push_back(static_cast<unsigned char>(v >> (8 * i)));
}

// ---------------------------------------------------------------- dtypes

const char* npy_descr(DType dtype) {
  switch (dtype) {
    case DType::F32:
      return "<f4";
    case DType::I32:
      return "<i4";
    case DType::U8:
      return "|u1";
  }
  MT_THROW(DTypeError, "npy: no descr for dtype ", dtype);
}

// descr is a numpy type string: byte order ('<' little, '>' big, '=' native, '|' not applicable), kind, size.
DType dtype_from_descr(const std::string& descr, const std::string& what) {
  const std::string_view d = descr;
  if (d.size() >= 2) {
    const char order = d[0];
    const std::string_view type = d.substr(1);
    if (type == "u1" && (order == '|' || order == '<' || order == '>' || order == '=')) return DType::U8;
    if (order == '>' && (type == "f4" || type == "i4"))
      MT_THROW(DTypeError, what, ": big-endian dtype '", descr,
               "' is not supported (save it as little-endian)");
    if (order == '<' || order == '=') {  // '=' is native order, little-endian on every supported host
      if (type == "f4") return DType::F32;
      if (type == "i4") return DType::I32;
    }
  }
  MT_THROW(DTypeError, what, ": unsupported dtype '", descr,
           "' (supported: '<f4' float32, '<i4' int32, '|u1' uint8)");
}

// ---------------------------------------------------------------- the header dict

struct NpyHeader {
  DType dtype = DType::F32;
  bool fortran_order = false;
  Shape shape;
};

// A parser for the Python literal numpy writes: a dict of string keys to strings, booleans, integers and
// tuples of integers. Whitespace and trailing commas are allowed anywhere Python allows them.
class HeaderParser {
 public:
  HeaderParser(std::string_view text, const std::string& what) : m_text(text), m_what(what) {}

  NpyHeader parse() {
    std::optional<std::string> descr;
    std::optional<bool> fortran;
    std::optional<std::vector<std::int64_t>> shape;
    expect('{');
    while (!peek('}')) {
      const std::string key = string_literal();
      expect(':');
      if (key == "descr") {
        skip_space();
        if (peek('['))
          MT_THROW(DTypeError, m_what, ": structured dtypes are not supported (descr is a list)");
        descr = string_literal();
      } else if (key == "fortran_order") {
        fortran = boolean();
      } else if (key == "shape") {
        shape = int_tuple();
      } else {
        fail("unexpected key '" + key + "'");
      }
      if (!peek('}')) expect(',');
    }
    expect('}');
    skip_space();
    if (m_pos != m_text.size()) fail("text after the closing brace");
    if (!descr || !fortran || !shape) fail("the keys 'descr', 'fortran_order' and 'shape' are required");

    NpyHeader h;
    h.dtype = dtype_from_descr(*descr, m_what);
    h.fortran_order = *fortran;
    MT_CHECK(shape->size() <= static_cast<std::size_t>(kMaxDims), ShapeError, m_what, ": rank ",
             shape->size(), " exceeds the ", kMaxDims, " dimensions a tensor can have");
    h.shape = Shape(*shape);
    validate_shape(h.shape, dtype_size(h.dtype), m_what.c_str());
    return h;
  }

 private:
  [[noreturn]] void fail(const std::string& why) const {
    MT_THROW(InvalidArgument, m_what, ": cannot parse the header (", why, " at offset ", m_pos,
             "): ", std::string(m_text));
  }
  void skip_space() {
    while (m_pos < m_text.size() &&
           (m_text[m_pos] == ' ' || m_text[m_pos] == '\t' || m_text[m_pos] == '\n' || m_text[m_pos] == '\r'))
      ++m_pos;
  }
  bool peek(char c) {
    skip_space();
    return m_pos < m_text.size() && m_text[m_pos] == c;
  }
  void expect(char c) {
    if (!peek(c)) fail(std::string("expected '") + c + "'");
    ++m_pos;
  }
  std::string string_literal() {
    skip_space();
    if (m_pos >= m_text.size() || (m_text[m_pos] != '\'' && m_text[m_pos] != '"')) fail("expected a string");
    const char quote = m_text[m_pos++];
    std::string s;
    while (m_pos < m_text.size() && m_text[m_pos] != quote) {
      if (m_text[m_pos] == '\\' && m_pos + 1 < m_text.size()) ++m_pos;
      s.push_back(m_text[m_pos++]);
    }
    if (m_pos >= m_text.size()) fail("unterminated string");
    ++m_pos;
    return s;
  }
  bool boolean() {
    skip_space();
    for (const auto& [word, value] : {std::pair{std::string_view("True"), true}, {"False", false}}) {
      if (m_text.substr(m_pos, word.size()) == word) {
        m_pos += word.size();
        return value;
      }
    }
    fail("expected True or False");
  }
  std::int64_t integer() {
    skip_space();
    const std::size_t start = m_pos;
    std::int64_t v = 0;
    while (m_pos < m_text.size() && m_text[m_pos] >= '0' && m_text[m_pos] <= '9') {
      const int digit = m_text[m_pos++] - '0';
      if (v > (std::numeric_limits<std::int64_t>::max() - digit) / 10) fail("extent overflows int64");
      v = v * 10 + digit;
    }
    if (m_pos == start) fail("expected a non-negative integer");
    if (m_pos < m_text.size() && (m_text[m_pos] == 'L' || m_text[m_pos] == 'l')) ++m_pos;  // Python 2 longs
    return v;
  }
  std::vector<std::int64_t> int_tuple() {
    std::vector<std::int64_t> dims;
    expect('(');
    while (!peek(')')) {
      dims.push_back(integer());
      if (!peek(')')) expect(',');
    }
    expect(')');
    return dims;
  }

  std::string_view m_text;
  const std::string& m_what;
  std::size_t m_pos = 0;
};

// Size of the preamble + header that starts at `p`, from its first `n` bytes (at least 12 are asked for).
std::size_t npy_header_size(const unsigned char* p, std::size_t n, const std::string& what) {
  MT_CHECK(std::memcmp(p, kNpyMagic.data(), std::min(n, kNpyMagic.size())) == 0, InvalidArgument, what,
           ": not a .npy file (wrong magic string; expected \\x93NUMPY)");
  MT_CHECK(n >= 8, InvalidArgument, what, ": truncated file (", n, " bytes; a .npy file starts with 10)");
  const int major = p[6], minor = p[7];
  MT_CHECK((major == 1 || major == 2 || major == 3) && minor == 0, InvalidArgument, what,
           ": unsupported .npy format version ", major, ".", minor, " (supported: 1.0, 2.0, 3.0)");
  const int len_bytes = major == 1 ? 2 : 4;
  MT_CHECK(n >= static_cast<std::size_t>(8 + len_bytes), InvalidArgument, what, ": truncated file (", n,
           " bytes, in the preamble)");
  return 8 + len_bytes + get_le(p + 8, len_bytes);
}

NpyHeader parse_npy_header(const unsigned char* p, std::size_t header_size, const std::string& what) {
  const std::size_t start = p[6] == 1 ? 10 : 12;
  return HeaderParser(std::string_view(reinterpret_cast<const char*>(p) + start, header_size - start), what)
      .parse();
}

Bytes make_npy_header(const Tensor& t) {
  std::string dict =
      detail::str("{'descr': '", npy_descr(t.dtype()), "', 'fortran_order': False, 'shape': (");
  for (int d = 0; d < t.dim(); ++d) {
    if (d > 0) dict += ", ";
    dict += std::to_string(t.size(d));
  }
  dict += t.dim() == 1 ? ",), }" : "), }";  // a 1-tuple needs its comma
  // Version 1.0 holds a header of up to 65535 bytes; 2.0 widens the length field (rank 8 never needs it, but
  // a reader must not assume that).
  int major = 1;
  std::size_t preamble = 10;
  std::size_t total = (preamble + dict.size() + 1 + kNpyAlign - 1) / kNpyAlign * kNpyAlign;
  if (total - preamble > 0xFFFF) {
    major = 2;
    preamble = 12;
    total = (preamble + dict.size() + 1 + kNpyAlign - 1) / kNpyAlign * kNpyAlign;
  }
  dict.append(total - preamble - dict.size() - 1, ' ');
  dict.push_back('\n');
  Bytes out(kNpyMagic.begin(), kNpyMagic.end());
  out.push_back(static_cast<unsigned char>(major));
  out.push_back(0);
  put_le(out, dict.size(), major == 1 ? 2 : 4);
  out.insert(out.end(), dict.begin(), dict.end());
  return out;
}

// A contiguous host tensor holding `t`'s values.
Tensor host_contiguous(const Tensor& t, const char* op) {
  t.check_defined(op);
  return t.is_cpu() ? t.contiguous() : t.contiguous().cpu();
}

// The C-order tensor for data laid out as `h` says, given a contiguous tensor `raw` of the stored bytes.
Tensor to_c_order(const Tensor& raw, const NpyHeader& h, Device device) {
  Tensor t = raw;
  if (h.fortran_order && h.shape.rank() > 1) {
    // Fortran order is C order of the reversed shape: reverse the dims back and copy.
    std::array<std::int64_t, kMaxDims> dims{};
    for (int d = 0; d < h.shape.rank(); ++d) dims[static_cast<std::size_t>(d)] = h.shape.rank() - 1 - d;
    t = t.permute(std::span<const std::int64_t>(dims.data(), static_cast<std::size_t>(h.shape.rank())))
            .contiguous();
  }
  return t.to(device);
}

Shape stored_shape(const NpyHeader& h) {
  if (!h.fortran_order) return h.shape;
  Shape s = h.shape;
  std::reverse(s.begin(), s.end());
  return s;
}

std::string data_mismatch(const NpyHeader& h, std::uint64_t have) {
  const std::uint64_t need = static_cast<std::uint64_t>(h.shape.numel()) * dtype_size(h.dtype);
  return detail::str(have < need ? "truncated data" : "size mismatch", ": shape ", h.shape, " of ", h.dtype,
                     " needs ", need, " bytes of data, the file holds ", have);
}

// A .npy held in memory (an .npz member).
Tensor decode_npy(const unsigned char* p, std::size_t n, Device device, const std::string& what) {
  const std::size_t header_size = npy_header_size(p, n, what);
  MT_CHECK(n >= header_size, InvalidArgument, what, ": truncated file (", n, " bytes, the header needs ",
           header_size, ")");
  const NpyHeader h = parse_npy_header(p, header_size, what);
  Tensor raw = empty(stored_shape(h), h.dtype);
  MT_CHECK(n - header_size == raw.nbytes(), ShapeError, what, ": ", data_mismatch(h, n - header_size));
  if (raw.nbytes()) std::memcpy(raw.data_ptr(), p + header_size, raw.nbytes());
  return to_c_order(raw, h, device);
}

std::string quoted(const std::filesystem::path& path) {
  return "'" + path.string() + "'";
}

std::ifstream open_in(const std::filesystem::path& path, const char* op) {
  std::ifstream in(path, std::ios::binary);
  if (!in) MT_THROW(InvalidArgument, op, ": cannot open ", quoted(path), ": ", std::strerror(errno));
  return in;
}

std::uint64_t file_size(const std::filesystem::path& path, const char* op) {
  std::error_code ec;
  const std::uintmax_t size = std::filesystem::file_size(path, ec);
  MT_CHECK(!ec, InvalidArgument, op, ": cannot open ", quoted(path), ": ", ec.message());
  return size;
}

void write_all(std::ofstream& out, const void* data, std::size_t n) {
  if (n) out.write(static_cast<const char*>(data), static_cast<std::streamsize>(n));
}

std::ofstream open_out(const std::filesystem::path& path, const char* op) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) MT_THROW(InvalidArgument, op, ": cannot create ", quoted(path), ": ", std::strerror(errno));
  return out;
}

void close_out(std::ofstream& out, const std::filesystem::path& path, const char* op) {
  out.close();
  if (!out) MT_THROW(InvalidArgument, op, ": writing ", quoted(path), " failed: ", std::strerror(errno));
}

// ---------------------------------------------------------------- .npz: zip archives
//
// Only what .npz needs of the zip format (PKWARE APPNOTE 6.3): one disk, no encryption, stored members
// (method 0) and, with zlib, deflated ones (method 8). A member is a local header, the name, an extra field
// and the data (and, when bit 3 of its flags is set, a data descriptor after them: the sizes and CRC are then
// only in the central directory, which is why a reader takes them from there). At the end: the central
// directory (one record per member), then the end-of-central-directory record. Past 4 GiB or 65535 members
// the ZIP64 extra field, end record and locator carry the 64-bit values and the 32-bit fields hold 0xFFFFFFFF
// (0xFFFF).

constexpr std::uint32_t kLocalSig = 0x04034b50, kCentralSig = 0x02014b50, kEndSig = 0x06054b50,
                        kZip64EndSig = 0x06064b50, kZip64LocatorSig = 0x07064b50;
constexpr std::uint64_t kMax32 = 0xFFFFFFFFu, kMax16 = 0xFFFFu;
constexpr std::size_t kLocalSize = 30, kCentralSize = 46, kEndSize = 22, kZip64EndSize = 56,
                      kZip64LocatorSize = 20;
constexpr std::uint16_t kDosDate1980 = 0x21;  // 1980-01-01, the earliest DOS date: files are reproducible
constexpr std::uint16_t kFlagEncrypted = 1, kFlagUtf8 = 0x800;
constexpr std::uint16_t kMethodStored = 0, kMethodDeflated = 8;

std::uint32_t crc32_of(const unsigned char* p, std::size_t n, std::uint32_t crc = 0) {
#if MT_HAS_ZLIB
  while (n > 0) {  // zlib counts in uInt
    const uInt chunk = static_cast<uInt>(std::min<std::size_t>(n, 1u << 30));
    crc = static_cast<std::uint32_t>(::crc32(crc, p, chunk));
    p += chunk;
    n -= chunk;
  }
  return crc;
#else
  static const std::array<std::uint32_t, 256> table = [] {
    std::array<std::uint32_t, 256> t{};
    for (std::uint32_t i = 0; i < 256; ++i) {
      std::uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  crc = ~crc;
  for (std::size_t i = 0; i < n; ++i) crc = table[(crc ^ p[i]) & 0xFF] ^ (crc >> 8);
  return ~crc;
#endif  // MT_HAS_ZLIB
}

struct ZipMember {
  std::string name;
  std::uint16_t flags = 0, method = 0;
  std::uint32_t crc = 0;
  std::uint64_t compressed = 0, size = 0, offset = 0;
};

bool needs_zip64(const ZipMember& m) {
  return m.size >= kMax32 || m.compressed >= kMax32 || m.offset >= kMax32;
}

std::uint16_t name_flags(const std::string& name) {
  const bool ascii = std::all_of(name.begin(), name.end(), [](char c) { return (c & 0x80) == 0; });
  return ascii ? 0 : kFlagUtf8;
}

Bytes local_header(const ZipMember& m) {
  const bool zip64 = needs_zip64(m);
  Bytes out;
  put_le(out, kLocalSig, 4);
  put_le(out, zip64 ? 45 : 20, 2);  // version needed: 4.5 for ZIP64, else 2.0
  put_le(out, m.flags, 2);
  put_le(out, m.method, 2);
  put_le(out, 0, 2);
  put_le(out, kDosDate1980, 2);
  put_le(out, m.crc, 4);
  put_le(out, zip64 ? kMax32 : m.compressed, 4);
  put_le(out, zip64 ? kMax32 : m.size, 4);
  put_le(out, m.name.size(), 2);
  put_le(out, zip64 ? 20 : 0, 2);
  out.insert(out.end(), m.name.begin(), m.name.end());
  if (zip64) {  // the local ZIP64 extra holds both sizes
    put_le(out, 1, 2);
    put_le(out, 16, 2);
    put_le(out, m.size, 8);
    put_le(out, m.compressed, 8);
  }
  return out;
}

void central_header(Bytes& out, const ZipMember& m) {
  const bool zip64 = needs_zip64(m);
  Bytes extra;
  if (zip64) {  // the central ZIP64 extra holds, in this order, the fields that overflow
    put_le(extra, 1, 2);
    put_le(extra, 0, 2);
    if (m.size >= kMax32) put_le(extra, m.size, 8);
    if (m.compressed >= kMax32) put_le(extra, m.compressed, 8);
    if (m.offset >= kMax32) put_le(extra, m.offset, 8);
    extra[2] = static_cast<unsigned char>(extra.size() - 4);
  }
  put_le(out, kCentralSig, 4);
  put_le(out, 0x0300 | (zip64 ? 45 : 20), 2);  // made by: Unix, so the permissions below are read
  put_le(out, zip64 ? 45 : 20, 2);
  put_le(out, m.flags, 2);
  put_le(out, m.method, 2);
  put_le(out, 0, 2);
  put_le(out, kDosDate1980, 2);
  put_le(out, m.crc, 4);
  put_le(out, std::min(m.compressed, kMax32), 4);
  put_le(out, std::min(m.size, kMax32), 4);
  put_le(out, m.name.size(), 2);
  put_le(out, extra.size(), 2);
  put_le(out, 0, 2);               // comment
  put_le(out, 0, 2);               // disk
  put_le(out, 0, 2);               // internal attributes
  put_le(out, 0100644u << 16, 4);  // external attributes: a regular file, rw-r--r--
  put_le(out, std::min(m.offset, kMax32), 4);
  out.insert(out.end(), m.name.begin(), m.name.end());
  out.insert(out.end(), extra.begin(), extra.end());
}

void end_records(Bytes& out, std::uint64_t n_members, std::uint64_t cd_offset, std::uint64_t cd_size) {
  const bool zip64 = n_members >= kMax16 || cd_offset >= kMax32 || cd_size >= kMax32;
  if (zip64) {
    const std::uint64_t end64_offset = cd_offset + cd_size;
    put_le(out, kZip64EndSig, 4);
    put_le(out, kZip64EndSize - 12, 8);  // the record's size, not counting these first 12 bytes
    put_le(out, 0x0300 | 45, 2);
    put_le(out, 45, 2);
    put_le(out, 0, 4);
    put_le(out, 0, 4);
    put_le(out, n_members, 8);
    put_le(out, n_members, 8);
    put_le(out, cd_size, 8);
    put_le(out, cd_offset, 8);
    put_le(out, kZip64LocatorSig, 4);
    put_le(out, 0, 4);
    put_le(out, end64_offset, 8);
    put_le(out, 1, 4);
  }
  put_le(out, kEndSig, 4);
  put_le(out, 0, 2);
  put_le(out, 0, 2);
  put_le(out, std::min(n_members, kMax16), 2);
  put_le(out, std::min(n_members, kMax16), 2);
  put_le(out, std::min(cd_size, kMax32), 4);
  put_le(out, std::min(cd_offset, kMax32), 4);
  put_le(out, 0, 2);
}

// Reads `n` bytes at `offset`, or throws naming `what` when the file is shorter.
Bytes read_at(std::ifstream& in, std::uint64_t file_size, std::uint64_t offset, std::uint64_t n,
              const std::string& what, const char* part) {
  MT_CHECK(offset <= file_size && n <= file_size - offset, InvalidArgument, what, ": truncated file (", part,
           " at bytes ", offset, "..", offset + n, " of a ", file_size, "-byte file)");
  Bytes out(static_cast<std::size_t>(n));
  in.seekg(static_cast<std::streamoff>(offset));
  in.read(reinterpret_cast<char*>(out.data()), static_cast<std::streamsize>(n));
  MT_CHECK(in.good() || n == 0, InvalidArgument, what, ": reading ", part, " failed: ", std::strerror(errno));
  return out;
}

// The members listed in the central directory, with the ZIP64 values folded in.
std::vector<ZipMember> read_central_directory(std::ifstream& in, std::uint64_t size,
                                              const std::string& what) {
  // The end record is the last 22 bytes but for a comment of up to 65535 bytes: search backwards.
  const std::uint64_t tail_size = std::min<std::uint64_t>(size, kEndSize + kMax16 + kZip64LocatorSize);
  const Bytes tail = read_at(in, size, size - tail_size, tail_size, what, "the end record");
  std::optional<std::size_t> end;
  for (std::size_t i = tail.size() >= kEndSize ? tail.size() - kEndSize + 1 : 0; i-- > 0;) {
    if (get_le(&tail[i], 4) == kEndSig) {
      end = i;
      break;
    }
  }
  MT_CHECK(end, InvalidArgument, what, ": not a zip archive (no end-of-central-directory record)");
  const unsigned char* e = &tail[*end];
  std::uint64_t n_members = get_le(e + 10, 2), cd_size = get_le(e + 12, 4), cd_offset = get_le(e + 16, 4);
  if (*end >= kZip64LocatorSize && get_le(&tail[*end - kZip64LocatorSize], 4) == kZip64LocatorSig) {
    const std::uint64_t end64_offset = get_le(&tail[*end - kZip64LocatorSize + 8], 8);
    const Bytes r = read_at(in, size, end64_offset, kZip64EndSize, what, "the ZIP64 end record");
    MT_CHECK(get_le(r.data(), 4) == kZip64EndSig, InvalidArgument, what,
             ": corrupt zip (bad ZIP64 end record)");
    n_members = get_le(&r[32], 8);
    cd_size = get_le(&r[40], 8);
    cd_offset = get_le(&r[48], 8);
  }
  const Bytes cd = read_at(in, size, cd_offset, cd_size, what, "the central directory");

  std::vector<ZipMember> members;
  std::size_t pos = 0;
  while (members.size() < n_members) {
    MT_CHECK(pos + kCentralSize <= cd.size() && get_le(&cd[pos], 4) == kCentralSig, InvalidArgument, what,
             ": corrupt zip (central directory record ", members.size(), " of ", n_members, ")");
    const unsigned char* c = &cd[pos];
    ZipMember m;
    m.flags = static_cast<std::uint16_t>(get_le(c + 8, 2));
    m.method = static_cast<std::uint16_t>(get_le(c + 10, 2));
    m.crc = static_cast<std::uint32_t>(get_le(c + 16, 4));
    m.compressed = get_le(c + 20, 4);
    m.size = get_le(c + 24, 4);
    m.offset = get_le(c + 42, 4);
    const std::size_t n_name = get_le(c + 28, 2), n_extra = get_le(c + 30, 2), n_comment = get_le(c + 32, 2);
    MT_CHECK(pos + kCentralSize + n_name + n_extra + n_comment <= cd.size(), InvalidArgument, what,
             ": corrupt zip (central directory record ", members.size(), " overruns the directory)");
    m.name.assign(reinterpret_cast<const char*>(c + kCentralSize), n_name);
    // Extra fields are (id, size, data) blocks; ZIP64's (id 1) holds the overflowing fields in a fixed order.
    const unsigned char* x = c + kCentralSize + n_name;
    for (std::size_t k = 0; k + 4 <= n_extra;) {
      const std::size_t id = get_le(x + k, 2), len = get_le(x + k + 2, 2);
      if (k + 4 + len > n_extra) break;
      if (id == 1) {
        std::size_t f = k + 4;
        for (std::uint64_t* field : {&m.size, &m.compressed, &m.offset}) {
          if (*field != kMax32) continue;
          MT_CHECK(f + 8 <= k + 4 + len, InvalidArgument, what,
                   ": corrupt zip (short ZIP64 field of member '", m.name, "')");
          *field = get_le(x + f, 8);
          f += 8;
        }
      }
      k += 4 + len;
    }
    pos += kCentralSize + n_name + n_extra + n_comment;
    members.push_back(std::move(m));
  }
  return members;
}

Bytes inflate_member(const Bytes& packed, std::uint64_t size, const std::string& what) {
#if MT_HAS_ZLIB
  Bytes out(static_cast<std::size_t>(size));
  z_stream zs{};
  MT_CHECK(inflateInit2(&zs, -MAX_WBITS) == Z_OK, InvalidArgument, what, ": zlib inflateInit2 failed");
  const unsigned char* in_next = packed.data();
  std::size_t in_left = packed.size(), out_left = out.size();
  unsigned char* out_next = out.data();
  int rc = Z_OK;
  while (rc == Z_OK) {  // zlib counts in uInt: feed and drain in chunks
    if (zs.avail_in == 0 && in_left > 0) {
      zs.next_in = const_cast<unsigned char*>(in_next);
      zs.avail_in = static_cast<uInt>(std::min<std::size_t>(in_left, 1u << 30));
      in_next += zs.avail_in;
      in_left -= zs.avail_in;
    }
    if (zs.avail_out == 0 && out_left > 0) {
      zs.next_out = out_next;
      zs.avail_out = static_cast<uInt>(std::min<std::size_t>(out_left, 1u << 30));
      out_next += zs.avail_out;
      out_left -= zs.avail_out;
    }
    rc = inflate(&zs, Z_NO_FLUSH);
  }
  const bool complete = rc == Z_STREAM_END && out_left == 0 && zs.avail_out == 0;
  inflateEnd(&zs);
  MT_CHECK(complete, InvalidArgument, what, ": corrupt deflate data (zlib: ", rc, ")");
  return out;
#else
  (void)packed;
  (void)size;
  MT_THROW(InvalidArgument, what,
           ": compressed .npz members (numpy.savez_compressed) are not supported: this "
           "build has no zlib; save with numpy.savez");
#endif  // MT_HAS_ZLIB
}

}  // namespace

// ---------------------------------------------------------------- .npy

void save_npy(const std::filesystem::path& path, const Tensor& t) {
  const Tensor host = host_contiguous(t, "save_npy");
  const Bytes header = make_npy_header(host);
  std::ofstream out = open_out(path, "save_npy");
  write_all(out, header.data(), header.size());
  write_all(out, host.nbytes() ? host.data_ptr() : nullptr, host.nbytes());
  close_out(out, path, "save_npy");
}

Tensor load_npy(const std::filesystem::path& path, Device device) {
  const std::string what = "load_npy: " + quoted(path);
  std::ifstream in = open_in(path, "load_npy");
  const std::uint64_t size = file_size(path, "load_npy");
  Bytes head(static_cast<std::size_t>(std::min<std::uint64_t>(size, 12)));
  in.read(reinterpret_cast<char*>(head.data()), static_cast<std::streamsize>(head.size()));
  const std::size_t header_size = npy_header_size(head.data(), head.size(), what);
  MT_CHECK(size >= header_size, InvalidArgument, what, ": truncated file (", size,
           " bytes, the header needs ", header_size, ")");
  if (header_size > head.size()) {
    const std::size_t have = head.size();
    head.resize(header_size);
    in.read(reinterpret_cast<char*>(head.data() + have), static_cast<std::streamsize>(header_size - have));
  }
  in.seekg(static_cast<std::streamoff>(header_size));
  const NpyHeader h = parse_npy_header(head.data(), header_size, what);
  Tensor raw = empty(stored_shape(h), h.dtype);
  MT_CHECK(size - header_size == raw.nbytes(), ShapeError, what, ": ", data_mismatch(h, size - header_size));
  in.read(static_cast<char*>(raw.data_ptr()), static_cast<std::streamsize>(raw.nbytes()));
  MT_CHECK(in.good() || raw.nbytes() == 0, InvalidArgument, what, ": reading failed: ", std::strerror(errno));
  return to_c_order(raw, h, device);
}

// ---------------------------------------------------------------- .npz

void save_npz(const std::filesystem::path& path, const std::map<std::string, Tensor>& tensors) {
  for (const auto& [name, t] : tensors) {
    MT_CHECK(!name.empty(), InvalidArgument, "save_npz: ", quoted(path), ": empty tensor name");
    MT_CHECK(name.size() + 4 <= kMax16, InvalidArgument, "save_npz: ", quoted(path), ": tensor name of ",
             name.size(), " bytes is too long for a zip member");
    t.check_defined("save_npz");
  }
  std::ofstream out = open_out(path, "save_npz");
  std::vector<ZipMember> members;
  std::uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    const Tensor host = host_contiguous(t, "save_npz");
    const Bytes header = make_npy_header(host);
    const auto* data = static_cast<const unsigned char*>(host.nbytes() ? host.data_ptr() : nullptr);
    ZipMember m;
    m.name = name + ".npy";
    m.flags = name_flags(m.name);
    m.method = kMethodStored;
    m.crc = crc32_of(data, host.nbytes(), crc32_of(header.data(), header.size()));
    m.size = m.compressed = header.size() + host.nbytes();
    m.offset = offset;
    const Bytes local = local_header(m);
    write_all(out, local.data(), local.size());
    write_all(out, header.data(), header.size());
    write_all(out, data, host.nbytes());
    offset += local.size() + m.size;
    members.push_back(std::move(m));
  }
  Bytes tail;
  for (const ZipMember& m : members) central_header(tail, m);
  const std::uint64_t cd_size = tail.size();
  end_records(tail, members.size(), offset, cd_size);
  write_all(out, tail.data(), tail.size());
  close_out(out, path, "save_npz");
}

std::map<std::string, Tensor> load_npz(const std::filesystem::path& path, Device device) {
  const std::string what = "load_npz: " + quoted(path);
  std::ifstream in = open_in(path, "load_npz");
  const std::uint64_t size = file_size(path, "load_npz");
  std::map<std::string, Tensor> out;
  for (const ZipMember& m : read_central_directory(in, size, what)) {
    if (!m.name.empty() && m.name.back() == '/') continue;  // a directory
    const std::string member = what + " member '" + m.name + "'";
    MT_CHECK(!(m.flags & kFlagEncrypted), InvalidArgument, member, ": encrypted members are not supported");
    // The local header's sizes may be zero (data descriptor) or ZIP64 placeholders: only its name and extra
    // lengths are used, to find the data.
    const Bytes local = read_at(in, size, m.offset, kLocalSize, member, "the local header");
    MT_CHECK(get_le(local.data(), 4) == kLocalSig, InvalidArgument, member,
             ": corrupt zip (bad local header)");
    const std::uint64_t data_offset = m.offset + kLocalSize + get_le(&local[26], 2) + get_le(&local[28], 2);
    Bytes bytes = read_at(in, size, data_offset, m.compressed, member, "the data");
    if (m.method == kMethodDeflated) {
      bytes = inflate_member(bytes, m.size, member);
    } else {
      MT_CHECK(m.method == kMethodStored, InvalidArgument, member, ": zip compression method ", m.method,
               " is not supported (stored and deflated are)");
      MT_CHECK(m.compressed == m.size, InvalidArgument, member, ": corrupt zip (stored member of ", m.size,
               " bytes occupies ", m.compressed, ")");
    }
    const std::uint32_t crc = crc32_of(bytes.data(), bytes.size());
    MT_CHECK(crc == m.crc, InvalidArgument, member, ": CRC-32 mismatch (stored ", m.crc, ", computed ", crc,
             "): the file is corrupt");
    std::string key = m.name;
    if (key.size() > 4 && key.ends_with(".npy")) key.resize(key.size() - 4);
    out.insert_or_assign(std::move(key), decode_npy(bytes.data(), bytes.size(), device, member));
  }
  return out;
}

}  // namespace mt
