// Which way a copy or memset call moves its bytes (role_bytes, decode.h:
// how many), decided once from the decoded call for every analysis and output. Directions are
// spelled as CUDA's driver API names them (cuMemcpyHtoD: HtoD).
#pragma once

#include <cstdint>
#include <optional>

#include "cudatrace/decode/decode.h"

namespace cudatrace {

// Copy directions in cudaMemcpyKind order (HtoH..DtoD), then peer copies
// (cudaMemcpyPeer, cuMemcpyPeer: between two devices), then Default (the
// driver decides from the pointers: cudaMemcpyDefault, cuMemcpy), then
// memsets, which tables list with the copies.
enum class Direction : std::uint8_t { HtoH, HtoD, DtoH, DtoD, Peer, Default, Memset };
inline constexpr int kDirections = 7;
inline constexpr int kCopyDirections = 6;  // the directions of copies: all but Memset
// "HtoH", "HtoD", "DtoH", "DtoD", "Peer", "Default", "Memset".
const char* direction_name(Direction d);

// A copy's direction, decided here only: its cudaMemcpyKind value when it
// has one (`memcpy_kind`; an unknown value is Default), else its name (HtoD,
// DtoH, DtoD, Peer), else Default; Memset for memsets. Without a value it is
// the direction the BPF side uses for a copy that has no kind argument
// (record/bpf_maps.cpp, record/node_stats.cpp).
Direction copy_direction(const ApiSpec& row, std::optional<std::uint64_t> memcpy_kind = std::nullopt);
// A decoded call's: its kind argument's value, if it has one.
Direction copy_direction(const Call& c);

}  // namespace cudatrace
