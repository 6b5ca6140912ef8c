// Package storage will hold the shard stores: Pebble key ranges keyed by
// [root][routing key][_id], the operation log, hard-linked child creation
// and span excision. It is the only package that may import Pebble, and it
// imports nothing of ours but routing.
//
// Status: not built yet (issue 3). The package exists so that the import
// direction is fixed from the start.
package storage
