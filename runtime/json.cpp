// The JSON writer (runtime/detail/json.h): RFC 8259 string escaping, round-trip numbers.
#include "minitensor/runtime/detail/json.h"

#include <charconv>
#include <cmath>

namespace mt::detail {

namespace {

// Length of the well-formed UTF-8 sequence at s[i] (Unicode 15, table 3-7), 0 when there is none.
std::size_t utf8_sequence_length(std::string_view s, std::size_t i) {
  const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = byte(i);
  std::size_t n = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // range of the second byte; later ones are always 80..BF
  if (c >= 0xC2 && c <= 0xDF) {
    n = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    n = 3;
    if (c == 0xE0) lo = 0xA0;  // overlong
    if (c == 0xED) hi = 0x9F;  // surrogates
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4;
    if (c == 0xF0) lo = 0x90;  // overlong
    if (c == 0xF4) hi = 0x8F;  // above U+10FFFF
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  if (byte(i + 1) < lo || byte(i + 1) > hi) return 0;
  for (std::size_t k = 2; k < n; ++k)
    if (byte(i + k) < 0x80 || byte(i + k) > 0xBF) return 0;
  return n;
}

}  // namespace

void json_append_string(std::string& out, std::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  out += '"';
  for (std::size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c >= 0x80) {
      const std::size_t n = utf8_sequence_length(s, i);
      if (n == 0) {
        out += "\\ufffd";
        ++i;
      } else {
        out.append(s.substr(i, n));
        i += n;
      }
      continue;
    }
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20 || c == 0x7f) {
          out += "\\u00";
          out += kHex[c >> 4];
          out += kHex[c & 0xf];
        } else {
          out += static_cast<char>(c);
        }
    }
    ++i;
  }
  out += '"';
}

std::string json_quote(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 2);
  json_append_string(out, s);
  return out;
}

void json_append_number(std::string& out, double v) {
  if (!std::isfinite(v)) {
    out += "null";
    return;
  }
  char buf[40];  // the shortest round-trip form of a double takes at most 24 characters
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  const std::string_view digits(buf, static_cast<std::size_t>(r.ptr - buf));
  out += digits;
  // Always a floating-point literal ("5.0", not "5"): a reader types the field the same way whatever its
  // value, and -0.0 keeps its sign.
  if (digits.find_first_of(".e") == std::string_view::npos) out += ".0";
}

void json_append_number(std::string& out, std::int64_t v) {
  char buf[24];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, r.ptr);
}

void json_append_number(std::string& out, std::uint64_t v) {
  char buf[24];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, r.ptr);
}

JsonWriter& JsonWriter::open(char c) {
  separate();
  m_out += c;
  m_has_item.push_back(false);
  return *this;
}

JsonWriter& JsonWriter::close(char c) {
  m_out += c;
  m_has_item.pop_back();
  m_after_key = false;
  return *this;
}

void JsonWriter::separate() {
  if (m_after_key) {
    m_after_key = false;
    return;
  }
  if (!m_has_item.empty()) {
    if (m_has_item.back()) m_out += ',';
    m_has_item.back() = true;
  }
}

JsonWriter& JsonWriter::key(std::string_view k) {
  separate();
  json_append_string(m_out, k);
  m_out += ':';
  m_after_key = true;
  return *this;
}

JsonWriter& JsonWriter::value(std::string_view v) {
  separate();
  json_append_string(m_out, v);
  return *this;
}

JsonWriter& JsonWriter::value(double v) {
  separate();
  json_append_number(m_out, v);
  return *this;
}

JsonWriter& JsonWriter::value(bool v) {
  separate();
  m_out += v ? "true" : "false";
  return *this;
}

JsonWriter& JsonWriter::null() {
  separate();
  m_out += "null";
  return *this;
}

JsonWriter& JsonWriter::raw(std::string_view json) {
  separate();
  m_out += json;
  return *this;
}

}  // namespace mt::detail
