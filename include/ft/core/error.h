// error.h: ft's exception types. Libraries throw; only main() exits.
#pragma once

#include <stdexcept>
#include <string>

namespace ft {

// Base for all ft errors: a message meant for the user.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

// Bad configuration or command-line input.
class ConfigError : public Error {
 public:
  using Error::Error;
};

// Malformed or truncated input file (checkpoint, shard, trace).
class FormatError : public Error {
 public:
  using Error::Error;
};

// I/O failure (open, read, write, fsync, rename).
class IoError : public Error {
 public:
  using Error::Error;
};

// The caching allocator could not satisfy a request within its budget.
class OutOfMemoryError : public Error {
 public:
  using Error::Error;
};

}  // namespace ft
