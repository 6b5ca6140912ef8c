// Package sim is the seeded simulation of the online split (see doc.go's
// full text once written).
package sim
