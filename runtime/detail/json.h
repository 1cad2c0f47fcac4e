// The one JSON writer of the library: every layer's to_json() and the Chrome trace go through it, so that
// every string is escaped the same way (RFC 8259) and every number reads back as the value written.
//
//   JsonWriter w;
//   w.begin_object().field("name", label).field("bytes", n).key("rows").begin_array();
//   for (...) w.value(x);
//   w.end_array().end_object();
//   return w.take();
#pragma once

#include <concepts>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

namespace mt::detail {

// Appends `s` as a JSON string, quotes included. '"' and '\' are escaped; every byte below 0x20 is written as
// \b \f \n \r \t or \u00XX, and 0x7f as \u007f, so a name never breaks a line of the output. Well-formed
// UTF-8 is kept as is; a byte that is not part of one (a stray continuation, an overlong form, a surrogate)
// becomes U+FFFD, because JSON text must be UTF-8 and a strict reader rejects the whole document otherwise.
void json_append_string(std::string& out, std::string_view s);
std::string json_quote(std::string_view s);  // the same, as a new string

// Appends the shortest decimal that reads back as exactly `v` (std::to_chars), always with a '.' or an
// exponent ("5.0"); NaN and infinities, which JSON cannot spell, as null. Integers as integers.
void json_append_number(std::string& out, double v);
void json_append_number(std::string& out, std::int64_t v);
void json_append_number(std::string& out, std::uint64_t v);

// Compact JSON, written in call order (so key order is the order of the calls: stable). Commas are placed by
// the writer; nesting mistakes are the caller's (it does not validate).
class JsonWriter {
 public:
  JsonWriter& begin_object() { return open('{'); }
  JsonWriter& end_object() { return close('}'); }
  JsonWriter& begin_array() { return open('['); }
  JsonWriter& end_array() { return close(']'); }
  JsonWriter& key(std::string_view k);

  JsonWriter& value(std::string_view v);
  JsonWriter& value(const char* v) { return value(std::string_view(v)); }  // not the bool overload
  JsonWriter& value(double v);
  JsonWriter& value(bool v);
  template <std::integral T>
  requires(!std::same_as<T, bool>) JsonWriter& value(T v) {
    separate();
    if constexpr (std::is_signed_v<T>)
      json_append_number(m_out, static_cast<std::int64_t>(v));
    else
      json_append_number(m_out, static_cast<std::uint64_t>(v));
    return *this;
  }
  JsonWriter& null();
  JsonWriter& raw(std::string_view json);  // an already written JSON value (another type's to_json())

  template <class T>
  JsonWriter& field(std::string_view k, const T& v) {
    key(k);
    return value(v);
  }

  const std::string& str() const { return m_out; }
  std::string take() { return std::move(m_out); }

 private:
  JsonWriter& open(char c);
  JsonWriter& close(char c);
  void
  separate();  // the comma before a value or key, unless it is the first of its container or follows a key

  std::string m_out;
  std::vector<bool> m_has_item;  // per open container: something was written in it
  bool m_after_key = false;
};

}  // namespace mt::detail
